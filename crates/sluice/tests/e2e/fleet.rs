//! Fleet mode end to end: real etcd servers (Debian's), `sluice run` processes in fleet mode,
//! their admin APIs, real origins.

use crate::support::{Etcd, Got, Origin, free_port, http1_get, http1_send};
use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TOKEN: &str = "fleet-test-token-0123456789abcdef";

/// A `sluice run` in fleet mode, killed by PID when dropped.
struct Gw {
    child: Child,
    http: SocketAddr,
    admin: SocketAddr,
}

impl Drop for Gw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The folder gateways share: token, keyring, certificates.
fn fleet_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("token", TOKEN.to_owned()),
        ("keyring", format!("k1 {}\n", "ab".repeat(32))),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    dir
}

fn gateway_config(
    dir: &Path,
    name: &str,
    etcd: &str,
    extra: &str,
) -> (PathBuf, SocketAddr, SocketAddr) {
    let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = format!(
        r#"[config]
source = "etcd"
endpoints = ["{etcd}"]
cache_file = "{name}-cache.json"
keyring = "keyring"
timeout = "2s"
[admin]
address = "{admin}"
token_file = "token"
[log]
access_log = "off"
level = "info"
[[listener]]
name = "http"
address = "{http}"
{extra}
"#
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    (path, http, admin)
}

async fn start_gw(dir: &Path, name: &str, etcd: &str, extra: &str) -> Gw {
    let (config, http, admin) = gateway_config(dir, name, etcd, extra);
    start_config(config, http, admin, name).await
}

async fn start_config(config: PathBuf, http: SocketAddr, admin: SocketAddr, name: &str) -> Gw {
    let dir = config.parent().unwrap().to_path_buf();
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--config"])
        .arg(&config)
        .arg("--pid-file")
        .arg(dir.join(format!("{name}.pid")))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut gw = Gw { child, http, admin };
    for _ in 0..500 {
        if tokio::net::TcpStream::connect(admin).await.is_ok() {
            return gw;
        }
        if let Ok(Some(status)) = gw.child.try_wait() {
            let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
            panic!("gateway {name} exited ({status}):\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("gateway {name} did not start within 10 s");
}

async fn admin(
    gw: &Gw,
    method: &str,
    path: &str,
    body: Option<Value>,
    if_match: Option<&str>,
) -> Got {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "admin")
        .header("authorization", format!("Bearer {TOKEN}"));
    if let Some(m) = if_match {
        req = req.header("if-match", m);
    }
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    let req = req.body(Full::new(body)).unwrap();
    http1_send(tokio::net::TcpStream::connect(gw.admin).await.unwrap(), req).await
}

/// Writes `value` at `key` under the prefix straight to etcd, as any client would.
async fn etcd_put(client: &sluice_fleet::Etcd, key: &str, value: Value) {
    client
        .put_raw(key, value.to_string().as_bytes())
        .await
        .unwrap();
}

async fn put_json(gw: &Gw, path: &str, body: Value) -> Got {
    admin(gw, "PUT", path, Some(body), None).await
}

async fn fleet_status(gw: &Gw) -> Value {
    let got = admin(gw, "GET", "/api/v1/fleet", None, None).await;
    assert_eq!(got.status, 200, "{}", got.body);
    serde_json::from_str(&got.body).unwrap()
}

/// Polls `check` until it holds (10 s at most).
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not reached within 10 s: {what}");
}

async fn served_by(gw: &Gw, path: &str) -> String {
    let got = http1_get(gw.http, "x", path).await;
    format!("{} {}", got.status, got.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_one_etcd_and_keep_serving_without_it() {
    let mut etcd = Etcd::start().await;
    let (a_origin, b_origin) = (Origin::start("A").await, Origin::start("B").await);
    let dir = fleet_dir();
    let a = start_gw(dir.path(), "a", &etcd.endpoint(), "").await;
    let b = start_gw(dir.path(), "b", &etcd.endpoint(), "").await;

    // A PUT through gateway A's admin API is served by gateway B.
    let put = put_json(
        &a,
        "/api/v1/upstreams/one",
        json!({"servers": [{"address": a_origin.addr.to_string()}]}),
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.body);
    let put = put_json(
        &a,
        "/api/v1/routes/all",
        json!({"path_prefix": "/", "upstream": "one"}),
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.body);
    let etag = put.headers["etag"].to_str().unwrap().to_owned();
    eventually("B serves A's route", || async {
        served_by(&b, "/whoami").await == "200 A"
    })
    .await;
    // The ETag is the object's etcd revision: reading it on B gives the same one.
    let read = admin(&b, "GET", "/api/v1/routes/all", None, None).await;
    assert_eq!(read.headers["etag"].to_str().unwrap(), etag);
    // A stale If-Match is a 412 and changes nothing.
    let stale = admin(
        &b,
        "PUT",
        "/api/v1/routes/all",
        Some(json!({"path_prefix": "/nothing", "upstream": "one"})),
        Some("\"1\""),
    )
    .await;
    assert_eq!(stale.status, 412, "{}", stale.body);
    assert_eq!(served_by(&a, "/whoami").await, "200 A");
    // An invalid PUT is refused with its located errors, before etcd.
    let bad = put_json(
        &b,
        "/api/v1/routes/bad",
        json!({"path_prefix": "/", "upstream": "nope"}),
    )
    .await;
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert!(bad.body.contains("\"path\":\"upstream\""), "{}", bad.body);
    let upstream_in_use = admin(&a, "DELETE", "/api/v1/upstreams/one", None, None).await;
    assert_eq!(upstream_in_use.status, 409, "{}", upstream_in_use.body);

    // An invalid object written straight to etcd is isolated: the rest applies, and both
    // gateways report it with its key.
    let client = etcd.client("/sluice").await;
    client
        .put_raw("routes/typo", br#"{"path_prefix": "/t", "upstrem": "one"}"#)
        .await
        .unwrap();
    client.put_raw("routes/notjson", b"{oops").await.unwrap();
    etcd_put(
        &client,
        "upstreams/two",
        json!({"servers": [{"address": b_origin.addr.to_string()}]}),
    )
    .await;
    etcd_put(
        &client,
        "routes/two",
        json!({"path_prefix": "/two/", "upstream": "two", "strip_prefix": "/two"}),
    )
    .await;
    for gw in [&a, &b] {
        eventually("the good route applies", || async {
            served_by(gw, "/two/whoami").await == "200 B"
        })
        .await;
        let status = fleet_status(gw).await;
        let invalid: Vec<&str> = status["invalid"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["key"].as_str().unwrap())
            .collect();
        assert_eq!(
            invalid,
            ["/sluice/routes/notjson", "/sluice/routes/typo"],
            "{status}"
        );
        let metrics = http1_get(gw.admin, "x", "/metrics").await.body;
        assert!(
            metrics.contains("sluice_fleet_invalid_objects 2"),
            "{metrics}"
        );
    }

    // etcd stopped: both keep serving and say so; a write is refused with 503.
    etcd.kill();
    for gw in [&a, &b] {
        eventually("etcd reported down", || async {
            fleet_status(gw).await["etcd"] == "down"
        })
        .await;
        assert_eq!(served_by(gw, "/two/whoami").await, "200 B");
        let status: Value =
            serde_json::from_str(&http1_get(gw.admin, "x", "/status").await.body).unwrap();
        assert_eq!(status["config"]["fleet"]["etcd"], "down");
    }
    let refused = put_json(
        &a,
        "/api/v1/routes/all",
        json!({"path_prefix": "/", "upstream": "two"}),
    )
    .await;
    assert_eq!(refused.status, 503, "{}", refused.body);

    // etcd back: changes flow again, both ways.
    etcd.restart().await;
    for gw in [&a, &b] {
        eventually("etcd reported up", || async {
            fleet_status(gw).await["etcd"] == "up"
        })
        .await;
    }
    let put = put_json(
        &b,
        "/api/v1/routes/all",
        json!({"path_prefix": "/", "upstream": "two"}),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.body);
    eventually("A serves B's change", || async {
        served_by(&a, "/whoami").await == "200 B"
    })
    .await;
    let gone = admin(&a, "DELETE", "/api/v1/routes/two", None, None).await;
    assert_eq!(gone.status, 200, "{}", gone.body);
    // Without route `two` (and its strip_prefix), route `all` takes the path as it is.
    eventually("B drops the deleted route", || async {
        served_by(&b, "/two/whoami").await == "200 B /two/whoami"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_watch_resyncs_and_a_gateway_starts_from_its_cache_without_etcd() {
    let mut etcd = Etcd::start().await;
    let (a_origin, b_origin) = (Origin::start("A").await, Origin::start("B").await);
    let dir = fleet_dir();
    let client = etcd.client("/sluice").await;
    for (name, origin) in [("a", &a_origin), ("b", &b_origin)] {
        let v = json!({"servers": [{"address": origin.addr.to_string()}]});
        client
            .put_raw(&format!("upstreams/{name}"), v.to_string().as_bytes())
            .await
            .unwrap();
    }
    client
        .put_raw("routes/r", br#"{"path_prefix": "/", "upstream": "a"}"#)
        .await
        .unwrap();
    let port = etcd.port;
    let g = start_gw(dir.path(), "g", &etcd.endpoint(), "").await;
    assert_eq!(served_by(&g, "/whoami").await, "200 A");

    // While the gateway cannot reach etcd, the route changes and history is compacted past
    // the gateway's revision; when etcd is back, its watch is refused and it reads all again.
    etcd.move_to(free_port()).await;
    let moved = etcd.client("/sluice").await;
    let mut last = 0;
    for _ in 0..3 {
        last = moved
            .put_raw("routes/r", br#"{"path_prefix": "/", "upstream": "b"}"#)
            .await
            .unwrap();
    }
    moved.compact(last).await.unwrap();
    etcd.move_to(port).await;
    eventually("the gateway resynced", || async {
        served_by(&g, "/whoami").await == "200 B"
    })
    .await;
    let status = fleet_status(&g).await;
    assert!(status["resyncs"].as_u64().unwrap() >= 1, "{status}");
    // The cache is written within about a second of a change. (At a revision at or past the
    // last change: a gateway's own writes, such as announcing itself again when etcd came
    // back, move etcd's revision too.)
    let cache = dir.path().join("g-cache.json");
    eventually("the cache holds the last revision", || async {
        std::fs::read_to_string(&cache).is_ok_and(|t| {
            let v: Value = serde_json::from_str(&t).unwrap_or_default();
            v["revision"].as_i64().is_some_and(|r| r >= last) && t.contains(r#""upstream": "b""#)
        })
    })
    .await;

    // A start with etcd down serves from the cache file, and says so. New ports: the old ones,
    // released when `g` went, may already belong to another test's server.
    drop(g);
    etcd.kill();
    let (config, http, admin_addr) = gateway_config(dir.path(), "g", &etcd.endpoint(), "");
    let g = start_config(config, http, admin_addr, "g2").await;
    assert_eq!(served_by(&g, "/whoami").await, "200 B");
    let status = fleet_status(&g).await;
    assert_eq!(status["started_from"], "cache_file", "{status}");
    assert_eq!(status["etcd"], "down", "{status}");
    // etcd back: the gateway catches up.
    etcd.restart().await;
    let client = etcd.client("/sluice").await;
    client
        .put_raw("routes/r", br#"{"path_prefix": "/", "upstream": "a"}"#)
        .await
        .unwrap();
    eventually("changes flow after a cache start", || async {
        served_by(&g, "/whoami").await == "200 A"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_push_then_pull_round_trips_a_file_with_sealed_keys() {
    let etcd = Etcd::start().await;
    let dir = fleet_dir();
    crate::support::write_cert(
        dir.path(),
        "site",
        sluice_tls::selfsigned::KeyKind::EcdsaP256,
        &["a.test"],
    );
    let file = dir.path().join("one.toml");
    std::fs::write(
        &file,
        r#"[[listener]]
name = "https"
address = "127.0.0.1:0"
[listener.tls]
[[certificate]]
name = "site"
cert = "site.crt"
key = "site.key"
[[upstream]]
name = "app"
balance = "least_conn"
servers = [{ address = "127.0.0.1:9000", weight = 2 }, { address = "127.0.0.1:9001" }]
[[route]]
name = "api"
hosts = ["a.test"]
path_prefix = "/api/"
upstream = "app"
strip_prefix = "/api"
[route.retry]
attempts = 3
[[route]]
name = "old"
path_exact = "/old"
redirect = { location = "/new", status = 301 }
[compression]
enabled = true
"#,
    )
    .unwrap();
    let sluice = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let keyring = dir.path().join("keyring");
    let keyring = keyring.to_str().unwrap();
    let pushed = sluice(&[
        "config",
        "push",
        file.to_str().unwrap(),
        "--etcd",
        &etcd.endpoint(),
        "--keyring",
        keyring,
    ]);
    assert!(
        pushed.contains("2 route(s), 1 upstream(s), 1 certificate(s) and the settings"),
        "{pushed}"
    );
    // The private key is sealed in etcd.
    let stored = etcd.client("/sluice").await.load_all().await.unwrap();
    let everything = format!("{:?}", stored.slots);
    assert!(everything.contains("BEGIN CERTIFICATE"));
    assert!(
        !everything.contains("PRIVATE KEY"),
        "a private key is in etcd in the clear"
    );

    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("pulled.toml");
    sluice(&[
        "config",
        "pull",
        "--out",
        out.to_str().unwrap(),
        "--etcd",
        &etcd.endpoint(),
        "--keyring",
        keyring,
    ]);
    let table =
        |p: &Path| -> toml::Table { toml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap() };
    let (orig, back) = (table(&file), table(&out));
    for key in ["route", "upstream", "compression"] {
        let mut a = orig[key].clone();
        let mut b = back[key].clone();
        // Same objects, in name order.
        if let (toml::Value::Array(a), toml::Value::Array(b)) = (&mut a, &mut b) {
            a.sort_by_key(|v| v["name"].as_str().unwrap().to_owned());
            b.sort_by_key(|v| v["name"].as_str().unwrap().to_owned());
        }
        assert_eq!(a, b, "{key}");
    }
    for ext in ["crt", "key"] {
        assert_eq!(
            std::fs::read(dir.path().join(format!("site.{ext}"))).unwrap(),
            std::fs::read(out_dir.path().join(format!("certs/site.{ext}"))).unwrap(),
            "{ext}"
        );
    }
    // Without the keyring, pull cannot open the key and says so.
    let failed = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "config",
            "pull",
            "--out",
            out.to_str().unwrap(),
            "--etcd",
            &etcd.endpoint(),
        ])
        .output()
        .unwrap();
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stderr).contains("keyring"));
}

/// The fleet's ticket keys: a session from gateway A resumes on gateway B, over TCP and over
/// QUIC (`http3 = true` in each machine's file; routes and certificates from etcd).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ticket_from_one_gateway_resumes_on_another_over_tcp_and_quic() {
    let etcd = Etcd::start().await;
    let origin = Origin::start("A").await;
    let dir = fleet_dir();
    crate::support::write_cert(
        dir.path(),
        "site",
        sluice_tls::selfsigned::KeyKind::EcdsaP256,
        &["a.test"],
    );
    // The certificate goes into etcd through the admin API of a gateway (key sealed).
    let https = |port: u16| {
        format!(
            "[[listener]]\nname = \"https\"\naddress = \"127.0.0.1:{port}\"\nhttp3 = true\n[listener.tls]\n"
        )
    };
    let client = etcd.client("/sluice").await;
    etcd_put(
        &client,
        "upstreams/o",
        json!({"servers": [{"address": origin.addr.to_string()}]}),
    )
    .await;
    client
        .put_raw("routes/all", br#"{"path_prefix": "/", "upstream": "o"}"#)
        .await
        .unwrap();
    let a = start_gw(dir.path(), "a", &etcd.endpoint(), "").await;
    let cert = json!({
        "cert_pem": std::fs::read_to_string(dir.path().join("site.crt")).unwrap(),
        "key_pem": std::fs::read_to_string(dir.path().join("site.key")).unwrap(),
    });
    let put = admin(&a, "PUT", "/api/v1/certificates/site", Some(cert), None).await;
    assert_eq!(put.status, 201, "{}", put.body);
    assert!(
        put.body.contains("key_sealed") && !put.body.contains("PRIVATE KEY"),
        "{}",
        put.body
    );
    drop(a);

    let (pa, pb) = (free_port(), free_port());
    let a = start_gw(dir.path(), "a2", &etcd.endpoint(), &https(pa)).await;
    let b = start_gw(dir.path(), "b2", &etcd.endpoint(), &https(pb)).await;
    // Both have the fleet's ticket keys (the first to start created them).
    eventually("both gateways hold the fleet's ticket keys", || async {
        let ka = fleet_status(&a).await["ticket_keys_revision"].clone();
        let kb = fleet_status(&b).await["ticket_keys_revision"].clone();
        ka.is_i64() && ka == kb
    })
    .await;
    let a_addr: SocketAddr = format!("127.0.0.1:{pa}").parse().unwrap();
    let b_addr: SocketAddr = format!("127.0.0.1:{pb}").parse().unwrap();
    let version = boring::ssl::SslVersion::TLS1_3;
    let (resumed, ticket) = crate::tls::resumable(a_addr, version, None).await;
    assert!(!resumed);
    let (resumed, _) = crate::tls::resumable(b_addr, version, ticket).await;
    assert!(resumed, "gateway B resumes gateway A's session");
    // Over QUIC too: the fleet's ticket keys are in the HTTP/3 side's TLS context, and the
    // route from etcd serves HTTP/3.
    let session = dir.path().join("quic.session");
    let resume = [format!("--session-file={}", session.display())];
    let resume: Vec<&str> = resume.iter().map(String::as_str).collect();
    let run = crate::http3::h3(a_addr, &["/whoami"], &resume).await;
    assert_eq!(run.body("whoami"), b"A", "{}", run.output);
    assert!(session.exists(), "gateway A sent a ticket over QUIC");
    let run = crate::http3::h3(b_addr, &["/whoami"], &resume).await;
    assert_eq!(run.body("whoami"), b"A", "{}", run.output);
    let metrics = admin(&b, "GET", "/metrics", None, None).await.body;
    assert!(
        metrics.contains("sluice_quic_handshakes_total{resumed=\"true\"} 1\n"),
        "gateway B resumed gateway A's QUIC session:\n{metrics}"
    );
    // The HTTPS listeners have no other certificate: deleting it would break their own
    // files' configuration, so it is refused (and etcd keeps it).
    let refused = admin(&a, "DELETE", "/api/v1/certificates/site", None, None).await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(refused.body.contains("own file"), "{}", refused.body);
    assert_eq!(
        admin(&b, "GET", "/api/v1/certificates/site", None, None)
            .await
            .status,
        200
    );
}

/// etcd over mutual TLS with authentication on: a gateway with the CA, a client certificate
/// and a user serves and writes the fleet's objects; one with the wrong password refuses to
/// start and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_reaches_etcd_over_mutual_tls_with_a_user_and_password() {
    use std::os::unix::fs::PermissionsExt;
    let dir = fleet_dir();
    let etcd = Etcd::start_tls(dir.path()).await;
    let origin = Origin::start("A").await;
    let read = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read("ca.crt")))
        .identity(etcd_client::Identity::from_pem(
            read("client.crt"),
            read("client.key"),
        ));
    let mut client = etcd_client::Client::connect(
        [etcd.endpoint()],
        Some(etcd_client::ConnectOptions::new().with_tls(tls)),
    )
    .await
    .unwrap();
    // etcd's root user needs the root role before authentication can be turned on.
    let _ = client.role_add("root").await;
    client.user_add("root", "s3cret", None).await.unwrap();
    client.user_grant_role("root", "root").await.unwrap();
    client.auth_enable().await.unwrap();

    let with_credentials = |name: &str, password: &str| {
        let file = dir.path().join(format!("{name}-password"));
        std::fs::write(&file, format!("{password}\n")).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (config, http, admin) = gateway_config(dir.path(), name, &etcd.endpoint(), "");
        let text = std::fs::read_to_string(&config).unwrap().replace(
            "timeout = \"2s\"\n",
            &format!(
                "timeout = \"2s\"\nca = \"ca.crt\"\ncert = \"client.crt\"\nkey = \"client.key\"\nuser = \"root\"\npassword_file = \"{name}-password\"\n"
            ),
        );
        std::fs::write(&config, text).unwrap();
        (config, http, admin)
    };

    let (config, http, admin_addr) = with_credentials("t", "s3cret");
    let g = start_config(config, http, admin_addr, "t").await;
    let put = put_json(
        &g,
        "/api/v1/upstreams/one",
        json!({"servers": [{"address": origin.addr.to_string()}]}),
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.body);
    let put = put_json(
        &g,
        "/api/v1/routes/r",
        json!({"path_prefix": "/", "upstream": "one"}),
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.body);
    assert_eq!(served_by(&g, "/whoami").await, "200 A");
    assert_eq!(fleet_status(&g).await["etcd"], "up");
    // The objects are in etcd, readable only with the credentials.
    let stored = client.get("/sluice/routes/r", None).await;
    assert!(stored.is_err(), "a client without a user read the route");

    // The wrong password: no start (and no cache file to start from), with etcd's reason.
    let (config, _, _) = with_credentials("w", "wrong");
    let mut bad = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut exited = None;
    for _ in 0..500 {
        if let Some(status) = bad.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let Some(status) = exited else {
        let _ = bad.kill();
        let _ = bad.wait();
        panic!("a gateway with the wrong etcd password kept running");
    };
    assert!(!status.success());
    let mut log = String::new();
    std::io::Read::read_to_string(&mut bad.stderr.take().unwrap(), &mut log).unwrap();
    assert!(log.contains("authentication failed"), "{log}");
}

/// Through `gw`'s admin API: upstream `one` (the origin) and route `all` caching everything
/// it serves for 10 minutes.
async fn cache_everything(gw: &Gw, origin: &Origin) {
    let put = put_json(
        gw,
        "/api/v1/upstreams/one",
        json!({"servers": [{"address": origin.addr.to_string()}]}),
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.body);
    let put = put_json(
        gw,
        "/api/v1/routes/all",
        json!({"path_prefix": "/", "upstream": "one", "cache": {"default_ttl": "10m"}}),
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.body);
}

/// "STATUS X-Cache" of `path` on the listener at `at`: a gateway that has not applied the
/// route yet (404) reads as such, to be waited for rather than failed.
async fn x_cache(at: SocketAddr, path: &str) -> String {
    let got = http1_get(at, "x", path).await;
    let cache = got
        .headers
        .get("x-cache")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    format!("{} {cache}", got.status)
}

/// A cache purge through one gateway's admin API empties that URL on every gateway of the
/// fleet, through etcd; the other URLs stay cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_purge_through_one_gateway_reaches_every_gateway() {
    let etcd = Etcd::start().await;
    let origin = Origin::start("A").await;
    let dir = fleet_dir();
    let a = start_gw(dir.path(), "a", &etcd.endpoint(), "").await;
    let b = start_gw(dir.path(), "b", &etcd.endpoint(), "").await;
    cache_everything(&a, &origin).await;
    for gw in [&a, &b] {
        eventually("the cached route applies", || async {
            x_cache(gw.http, "/whoami?warm").await == "200 HIT"
        })
        .await;
        for path in ["/whoami?p", "/whoami?keep"] {
            let _ = x_cache(gw.http, path).await;
            assert_eq!(x_cache(gw.http, path).await, "200 HIT");
        }
    }
    let purged = admin(
        &b,
        "POST",
        "/api/v1/cache/purge",
        Some(json!({"host": "x", "path": "/whoami?p"})),
        None,
    )
    .await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    assert!(purged.body.contains("\"fleet\":true"), "{}", purged.body);
    // The gateway that took it purged at once; the other when etcd tells it.
    assert_eq!(x_cache(b.http, "/whoami?p").await, "200 MISS");
    eventually("A purged the URL too", || async {
        x_cache(a.http, "/whoami?p").await == "200 MISS"
    })
    .await;
    for gw in [&a, &b] {
        assert_eq!(
            x_cache(gw.http, "/whoami?keep").await,
            "200 HIT",
            "another URL stays"
        );
    }
}

/// A gateway with a disk tier that is down while the fleet purges a URL does not serve the
/// purged entry when it starts again (etcd keeps the purge and the gateway applies it as of
/// when it was issued), and keeps serving from disk what the purge did not name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_down_during_a_fleet_purge_applies_it_when_it_returns() {
    let etcd = Etcd::start().await;
    let origin = Origin::start("A").await;
    let dir = fleet_dir();
    let disk = format!(
        "[cache.disk]\npath = \"{}\"\nmax_size = \"16m\"",
        dir.path().join("b-disk").display()
    );
    let a = start_gw(dir.path(), "a", &etcd.endpoint(), "").await;
    let b = start_gw(dir.path(), "b", &etcd.endpoint(), &disk).await;
    let b_http = b.http;
    cache_everything(&a, &origin).await;
    eventually("B caches", || async {
        x_cache(b_http, "/whoami?warm").await == "200 HIT"
    })
    .await;
    for path in ["/whoami?p", "/whoami?p2", "/whoami?keep"] {
        let _ = x_cache(b_http, path).await;
        assert_eq!(x_cache(b_http, path).await, "200 HIT");
    }
    // On disk before B goes (the writer's thread writes behind the response).
    eventually("B wrote its entries to disk", || async {
        std::fs::read_dir(dir.path().join("b-disk"))
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "entry"))
                })
                .count()
            })
            .unwrap_or(0)
            >= 4
    })
    .await;
    drop(b);
    for path in ["/whoami?p", "/whoami?p2"] {
        let purged = admin(
            &a,
            "POST",
            "/api/v1/cache/purge",
            Some(json!({"host": "x", "path": path})),
            None,
        )
        .await;
        assert_eq!(purged.status, 200, "{}", purged.body);
        assert!(purged.body.contains("\"fleet\":true"), "{}", purged.body);
    }
    // Started again on the same disk tier (and ports of its own: the old ones may be
    // another test's by now).
    let b = start_gw(dir.path(), "b", &etcd.endpoint(), &disk).await;
    let b_http = b.http;
    // Until B has read the purges etcd keeps, it serves nothing from disk.
    assert_eq!(
        x_cache(b_http, "/whoami?p").await,
        "200 MISS",
        "the purged entry must not come back from disk"
    );
    eventually("B applied the fleet's kept purges", || async {
        let status = admin(&b, "GET", "/status", None, None).await;
        let v: Value = serde_json::from_str(&status.body).unwrap_or_default();
        v["cache"]["purges_recorded"].as_u64().unwrap_or(0) >= 2
    })
    .await;
    assert_eq!(
        x_cache(b_http, "/whoami?p2").await,
        "200 MISS",
        "a purge B did not see is applied to its disk tier"
    );
    assert_eq!(
        x_cache(b_http, "/whoami?keep").await,
        "200 HIT",
        "what the purge did not name is served from disk on its first request"
    );
    drop(b);
}

/// `GET /api/v1/requests?fleet=1` on one gateway asks every gateway etcd knows of and merges
/// their recent requests, each marked with its gateway; one that is down is named, not hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_log_of_every_gateway_is_searched_through_one() {
    let etcd = Etcd::start().await;
    let origin = Origin::start("A").await;
    let dir = fleet_dir();
    let a = start_gw(dir.path(), "a", &etcd.endpoint(), "").await;
    let b = start_gw(dir.path(), "b", &etcd.endpoint(), "").await;
    let put = put_json(
        &a,
        "/api/v1/upstreams/one",
        json!({"servers": [{"address": origin.addr.to_string()}]}),
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.body);
    let put = put_json(
        &a,
        "/api/v1/routes/all",
        json!({"path_prefix": "/", "upstream": "one"}),
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.body);
    for (gw, tag) in [(&a, "on-a"), (&b, "on-b")] {
        eventually("the route applies", || async {
            served_by(gw, "/whoami").await == "200 A"
        })
        .await;
        for _ in 0..3 {
            assert_eq!(
                served_by(gw, &format!("/echo/{tag}")).await,
                format!("200 /echo/{tag}")
            );
        }
    }
    let search = |gw: &Gw, q: &'static str| {
        let gw_admin = gw.admin;
        async move {
            let got = http1_send(
                tokio::net::TcpStream::connect(gw_admin).await.unwrap(),
                http::Request::get(format!("/api/v1/requests?{q}"))
                    .header("host", "admin")
                    .header("authorization", format!("Bearer {TOKEN}"))
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
            .await;
            (
                got.status,
                serde_json::from_str::<Value>(&got.body).unwrap(),
            )
        }
    };
    // Both gateways announce themselves within a moment of starting.
    let mut merged = Value::Null;
    for _ in 0..100 {
        let (status, v) = search(&b, "fleet=1&path=/echo/").await;
        assert_eq!(status, 200, "{v:#}");
        merged = v;
        if merged["gateways"].as_array().map(Vec::len) == Some(2) && merged["matched"] == 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(merged["matched"], 6, "{merged:#}");
    let rows = merged["requests"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    let by_gateway = |tag: &str| -> Vec<String> {
        rows.iter()
            .filter(|r| r["path"] == format!("/echo/{tag}"))
            .map(|r| r["gateway"].as_str().unwrap().to_owned())
            .collect()
    };
    let (on_a, on_b) = (by_gateway("on-a"), by_gateway("on-b"));
    assert_eq!((on_a.len(), on_b.len()), (3, 3), "{merged:#}");
    assert!(
        on_a.iter()
            .all(|g| g.ends_with(&format!(":{}", a.admin.port()))),
        "{merged:#}"
    );
    assert!(
        on_b.iter()
            .all(|g| g.ends_with(&format!(":{}", b.admin.port()))),
        "{merged:#}"
    );
    // Newest first across gateways: B's requests came last.
    assert_eq!(rows[0]["path"], "/echo/on-b");
    // Without fleet=1, a gateway answers for itself.
    let (_, own) = search(&a, "path=/echo/").await;
    assert_eq!(own["matched"], 3, "{own:#}");
    let (status, bad) = search(&a, "fleet=1&status=9").await;
    assert_eq!(status, 400, "{bad:#}");

    // B stops: A still answers, naming B as unreachable until its lease ends.
    let b_admin = b.admin;
    drop(b);
    let (status, v) = search(&a, "fleet=1&path=/echo/").await;
    assert_eq!(status, 200);
    assert_eq!(v["matched"], 3, "{v:#}");
    let gateways = v["gateways"].as_array().unwrap();
    let gone = gateways.iter().find(|g| {
        g["admin"]
            .as_str()
            .unwrap()
            .ends_with(&b_admin.port().to_string())
    });
    // Its key lives as long as its lease (15 s): it is listed, with why it did not answer.
    let gone = gone.unwrap_or_else(|| panic!("B is still listed: {v:#}"));
    assert!(
        gone["error"]
            .as_str()
            .is_some_and(|e| e.contains("connecting")),
        "{v:#}"
    );
}
