//! The admin API's configuration edits, against a real gateway, its admin listener and a
//! configuration file: token, ETag and If-Match, located errors by JSON path, 409 on an
//! upstream in use, the change in the file with its comments kept, certificates from PEM.

use crate::support::*;
use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};
use sluice_config::CertCache;
use sluice_control::{Controller, Source, Target, TargetFuture};
use sluice_proxy::Gateway;
use sluice_tls::selfsigned::KeyKind;
use std::net::SocketAddr;
use std::sync::Arc;

const TOKEN: &str = "api-test-token-0123456789abcdef";

/// The gateway as the controller applies to it.
struct Apply(Arc<Gateway>);

impl Target for Apply {
    fn apply(&self, snapshot: Arc<sluice_config::Snapshot>) -> TargetFuture<'_> {
        Box::pin(async move {
            self.0
                .apply(snapshot)
                .await
                .map(|r| format!("{r:?}"))
                .map_err(|e| e.to_string())
        })
    }
}

/// A gateway run from a file, with its controller and admin listener.
struct Managed {
    gateway: Arc<Gateway>,
    admin: SocketAddr,
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
    _admin_task: tokio::task::JoinHandle<()>,
}

impl Managed {
    async fn start(dir: tempfile::TempDir, text: &str) -> Managed {
        let path = dir.path().join("sluice.toml");
        std::fs::write(&path, text).unwrap();
        Self::start_from(dir, Source::File(path.clone()), path).await
    }

    /// Like the embedded default: text in memory, saved to `path` by the first edit.
    async fn start_text(dir: tempfile::TempDir, text: &str) -> Managed {
        let path = dir.path().join("autosave.toml");
        let source = Source::Text {
            text: text.to_owned(),
            name: "<embedded default>".into(),
            base_dir: dir.path().to_path_buf(),
            autosave: Some(path.clone()),
        };
        Self::start_from(dir, source, path).await
    }

    async fn start_from(
        dir: tempfile::TempDir,
        source: Source,
        path: std::path::PathBuf,
    ) -> Managed {
        use std::os::unix::fs::PermissionsExt;
        let token = dir.path().join("admin.token");
        std::fs::write(&token, TOKEN).unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let certs = Arc::new(CertCache::new());
        let snapshot =
            Arc::new(Controller::load(&source, &certs).unwrap_or_else(|e| panic!("{e}")));
        let gateway = Arc::new(
            Gateway::start_with_log(snapshot.clone(), sluice_proxy::AccessLog::off())
                .await
                .unwrap(),
        );
        let control = Arc::new(Controller::new(
            source,
            Arc::new(Apply(gateway.clone())),
            certs,
            &snapshot,
        ));
        let (admin, task) = sluice_admin::serve(
            "127.0.0.1:0".parse().unwrap(),
            sluice_admin::Sources {
                gateway: gateway.clone(),
                control: Some(control),
                started: std::time::Instant::now(),
            },
        )
        .await
        .unwrap();
        Managed {
            gateway,
            admin,
            path,
            _dir: dir,
            _admin_task: task,
        }
    }

    fn http(&self) -> SocketAddr {
        self.gateway.local_addr("http").unwrap()
    }

    fn file(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap()
    }

    /// One request to the admin listener: (status, ETag, JSON body).
    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Option<String>, Value) {
        let mut req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "admin");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(
                body.map(|b| b.to_string()).unwrap_or_default(),
            )))
            .unwrap();
        let tcp = tokio::net::TcpStream::connect(self.admin).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(conn);
        let resp = sender.send_request(req).await.unwrap();
        let etag = resp
            .headers()
            .get("etag")
            .map(|v| v.to_str().unwrap().to_owned());
        let got = collect(resp).await;
        let json = serde_json::from_str(&got.body).unwrap_or(Value::String(got.body));
        (got.status, etag, json)
    }

    async fn write(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let auth = format!("Bearer {TOKEN}");
        let (status, _, v) = self
            .call(method, path, body, &[("authorization", auth.as_str())])
            .await;
        (status, v)
    }
}

fn config(origin: &Origin) -> String {
    format!(
        r#"# The team's gateway. Keep this comment.
[admin]
address = "127.0.0.1:0"
token_file = "admin.token"

[[listener]]
name = "http"
address = "127.0.0.1:0"

[[upstream]]
name = "o"   # the first origin
servers = [{{ address = "{}" }}]

[[route]]
name = "r"
upstream = "o"
"#,
        origin.addr
    )
}

#[tokio::test]
async fn edits_need_the_token_land_in_the_file_with_its_comments_and_are_served() {
    let (a, b) = (Origin::start("A").await, Origin::start("B").await);
    let m = Managed::start(tempfile::tempdir().unwrap(), &config(&a)).await;

    let (status, etag, route) = m.call("GET", "/api/v1/routes/r", None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(route, json!({ "name": "r", "upstream": "o" }));
    let etag = etag.expect("an ETag");
    assert_eq!(etag, format!("\"{}\"", m.gateway.snapshot().revision));

    let upstream = json!({ "servers": [{ "address": b.addr.to_string() }], "keepalive": 4 });
    let (status, _, _) = m
        .call("PUT", "/api/v1/upstreams/b", Some(upstream.clone()), &[])
        .await;
    assert_eq!(status, 401, "no token, no write");
    let (status, _, _) = m
        .call(
            "PUT",
            "/api/v1/upstreams/b",
            Some(upstream.clone()),
            &[("authorization", "Bearer wrong-token-0123456789")],
        )
        .await;
    assert_eq!(status, 401);

    let (status, created) = m.write("PUT", "/api/v1/upstreams/b", Some(upstream)).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["keepalive"], 4);
    let (status, v) = m
        .write(
            "PUT",
            "/api/v1/routes/b",
            Some(json!({ "path_prefix": "/b", "upstream": "b" })),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(http1_get(m.http(), "x", "/b/page").await.body, "B /b/page");
    assert_eq!(http1_get(m.http(), "x", "/other").await.body, "A /other");

    // Replacing an object: 200, and untouched keys keep their comments.
    let (status, v) = m
        .write(
            "PUT",
            "/api/v1/upstreams/o",
            Some(json!({ "servers": [{ "address": a.addr.to_string() }], "max_fails": 3 })),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let file = m.file();
    assert!(
        file.starts_with("# The team's gateway. Keep this comment.\n"),
        "{file}"
    );
    assert!(file.contains("name = \"o\"   # the first origin"), "{file}");
    assert!(file.contains("max_fails = 3"), "{file}");
    assert!(file.contains("path_prefix = \"/b\""), "{file}");

    // The file is the truth: a restart would load the same configuration.
    let reloaded = sluice_config::load_file(&m.path).unwrap();
    assert_eq!(reloaded.revision, m.gateway.snapshot().revision);
    assert_eq!(reloaded.routes.len(), 2);

    let (status, _, config) = m.call("GET", "/api/v1/config", None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(config["route"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_stale_if_match_or_a_hand_edit_is_412_and_changes_nothing() {
    let a = Origin::start("A").await;
    let m = Managed::start(tempfile::tempdir().unwrap(), &config(&a)).await;
    let before = m.file();
    let auth = format!("Bearer {TOKEN}");
    let body = json!({ "path_prefix": "/x", "upstream": "o" });
    let (status, _, v) = m
        .call(
            "PUT",
            "/api/v1/routes/x",
            Some(body.clone()),
            &[
                ("authorization", &auth),
                ("if-match", "\"0000000000000000\""),
            ],
        )
        .await;
    assert_eq!(status, 412, "{v}");
    assert_eq!(m.file(), before);

    // With the current ETag it goes through.
    let (_, etag, _) = m.call("GET", "/api/v1/routes/r", None, &[]).await;
    let etag = etag.unwrap();
    let (status, _, v) = m
        .call(
            "PUT",
            "/api/v1/routes/x",
            Some(body),
            &[("authorization", &auth), ("if-match", &etag)],
        )
        .await;
    assert_eq!(status, 201, "{v}");

    // Someone edits the file by hand and does not reload: the API refuses to build on it.
    std::fs::write(&m.path, format!("{}\n# hand edit\n", m.file())).unwrap();
    let (status, v) = m
        .write(
            "PUT",
            "/api/v1/routes/y",
            Some(json!({ "upstream": "o", "path_prefix": "/y" })),
        )
        .await;
    assert_eq!(status, 412, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("changed on disk"),
        "{v}"
    );
}

#[tokio::test]
async fn an_invalid_object_is_422_naming_the_field_by_its_json_path() {
    let a = Origin::start("A").await;
    let m = Managed::start(tempfile::tempdir().unwrap(), &config(&a)).await;
    let before = m.file();

    let (status, v) = m
        .write(
            "PUT",
            "/api/v1/routes/bad",
            Some(json!({ "upstream": "nope" })),
        )
        .await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["errors"][0]["path"], "upstream", "{v}");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("`nope`"),
        "{v}"
    );

    let (status, v) = m
        .write(
            "PUT",
            "/api/v1/upstreams/o",
            Some(json!({ "servers": [{ "address": "no port here" }], "balance": "fastest" })),
        )
        .await;
    assert_eq!(status, 422, "{v}");
    let paths: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert!(
        paths.contains(&"servers[0].address") && paths.contains(&"balance"),
        "{v}"
    );
    assert_eq!(m.file(), before, "nothing was written");
    assert_eq!(http1_get(m.http(), "x", "/").await.body, "A /");
}

#[tokio::test]
async fn deleting_an_upstream_in_use_is_409_naming_the_route() {
    let a = Origin::start("A").await;
    let m = Managed::start(tempfile::tempdir().unwrap(), &config(&a)).await;
    let (status, v) = m.write("DELETE", "/api/v1/upstreams/o", None).await;
    assert_eq!(status, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains("route `r`"), "{v}");

    let (status, v) = m.write("DELETE", "/api/v1/routes/r", None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(http1_get(m.http(), "x", "/").await.status, 404);
    let (status, v) = m.write("DELETE", "/api/v1/upstreams/o", None).await;
    assert_eq!(status, 200, "{v}");
    let (status, _) = m.write("DELETE", "/api/v1/upstreams/o", None).await;
    assert_eq!(status, 404);
    assert!(!m.file().contains("[[upstream]]"));
}

#[tokio::test]
async fn a_certificate_sent_as_pem_is_stored_privately_and_served() {
    let a = Origin::start("A").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "first", KeyKind::EcdsaP256, &["first.test"]);
    let text = config(&a).replace(
        "[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n",
        "[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:0\"\n\n[[listener]]\nname = \"https\"\naddress = \"127.0.0.1:0\"\n[listener.tls]\n\n[[certificate]]\nname = \"first\"\ncert = \"first.crt\"\nkey = \"first.key\"\n",
    );
    let m = Managed::start(dir, &text).await;

    let (cert, key) =
        sluice_tls::selfsigned::generate(KeyKind::EcdsaP256, &["second.test"], 30).unwrap();
    let body = json!({
        "cert_pem": String::from_utf8(cert.to_pem().unwrap()).unwrap(),
        "key_pem": String::from_utf8(key.private_key_to_pem_pkcs8().unwrap()).unwrap(),
    });
    let (status, v) = m
        .write("PUT", "/api/v1/certificates/second", Some(body))
        .await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(
        v,
        json!({ "name": "second", "cert": "certs/second.crt", "key": "certs/second.key" })
    );
    let key_file = m.path.parent().unwrap().join("certs/second.key");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let h = tls_connect(
        m.gateway.local_addr("https").unwrap(),
        &ClientOpts {
            sni: Some("second.test"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let served = h.stream.ssl().peer_certificate().unwrap().to_der().unwrap();
    assert_eq!(served, cert.to_der().unwrap());

    // A key that does not belong to the certificate: 422, and the old files stay.
    let (_, other_key) =
        sluice_tls::selfsigned::generate(KeyKind::EcdsaP256, &["x.test"], 30).unwrap();
    let body = json!({
        "cert_pem": String::from_utf8(cert.to_pem().unwrap()).unwrap(),
        "key_pem": String::from_utf8(other_key.private_key_to_pem_pkcs8().unwrap()).unwrap(),
    });
    let (status, v) = m
        .write("PUT", "/api/v1/certificates/second", Some(body))
        .await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["errors"][0]["path"], "key", "{v}");
    assert_eq!(
        std::fs::read(&key_file).unwrap(),
        key.private_key_to_pem_pkcs8().unwrap(),
        "the stored key was put back"
    );
}

#[tokio::test]
async fn the_first_edit_of_an_in_memory_configuration_saves_it_to_its_autosave_file() {
    let (a, b) = (Origin::start("A").await, Origin::start("B").await);
    let m = Managed::start_text(tempfile::tempdir().unwrap(), &config(&a)).await;
    assert!(!m.path.exists());
    let (status, v) = m
        .write(
            "PUT",
            "/api/v1/upstreams/o",
            Some(json!({ "servers": [{ "address": b.addr.to_string() }] })),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(http1_get(m.http(), "x", "/").await.body, "B /");
    let saved = m.file();
    assert!(saved.starts_with("# The team's gateway."), "{saved}");
    assert!(saved.contains(&b.addr.to_string()), "{saved}");
    // From now on the file is the source: a hand edit there is noticed.
    std::fs::write(&m.path, format!("{saved}\n# by hand\n")).unwrap();
    let (status, _) = m
        .write(
            "PUT",
            "/api/v1/routes/y",
            Some(json!({ "upstream": "o", "path_prefix": "/y" })),
        )
        .await;
    assert_eq!(status, 412);
}

/// A CA in `pki` and, issued by it, `stem`.crt/.key for 127.0.0.1 (server and client use).
fn pki_issue(pki: &std::path::Path, stem: &str) {
    if !pki.join("ca.crt").exists() {
        issue(pki, "ca", "admin test CA", None, &[]);
    }
    let ca = boring::x509::X509::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap();
    let key = boring::pkey::PKey::private_key_from_pem(&std::fs::read(pki.join("ca.key")).unwrap())
        .unwrap();
    issue(pki, stem, stem, Some((&ca, &key)), &["127.0.0.1"]);
}

/// One HTTPS request to the admin listener, verifying its certificate against `pki`'s CA and
/// presenting `pki`/`client`.crt when given: (status, body, the serial of the certificate the
/// listener presented), or the error the client saw.
async fn https_call(
    addr: SocketAddr,
    pki: &std::path::Path,
    client: Option<&str>,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String, Vec<u8>), String> {
    use boring::ssl::{SslConnector, SslMethod};
    let mut b = SslConnector::builder(SslMethod::tls()).unwrap();
    b.set_ca_file(pki.join("ca.crt")).unwrap();
    if let Some(stem) = client {
        b.set_certificate_chain_file(pki.join(format!("{stem}.crt")))
            .unwrap();
        b.set_private_key_file(
            pki.join(format!("{stem}.key")),
            boring::ssl::SslFiletype::PEM,
        )
        .unwrap();
    }
    let config = b.build().configure().unwrap();
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let tls = tokio_boring::connect(config, "127.0.0.1", tcp)
        .await
        .map_err(|e| e.to_string())?;
    let serial = tls
        .ssl()
        .peer_certificate()
        .unwrap()
        .serial_number()
        .to_bn()
        .unwrap()
        .to_vec();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "admin");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = sender
        .send_request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .map_err(|e| e.to_string())?;
    let got = collect(resp).await;
    Ok((got.status, got.body, serial))
}

#[tokio::test]
async fn the_admin_listener_serves_https_to_clients_with_certificates_and_follows_a_renewed_one() {
    let o = Origin::start("o").await;
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    pki_issue(&pki, "admin");
    pki_issue(&pki, "operator");
    let text = config(&o).replace(
        "token_file = \"admin.token\"\n",
        "token_file = \"admin.token\"\n[admin.tls]\ncertificate = \"pki/admin.crt\"\nkey = \"pki/admin.key\"\nclient_ca = \"pki/ca.crt\"\n",
    );
    let m = Managed::start(dir, &text).await;

    // An operator with a certificate of the CA reads and writes over HTTPS.
    let (status, body, first) = https_call(m.admin, &pki, Some("operator"), "GET", "/status", None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["config"].is_object(), "{v}");
    let (status, body, _) = https_call(
        m.admin,
        &pki,
        Some("operator"),
        "POST",
        "/api/v1/reload",
        Some(TOKEN),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");

    // Without a client certificate: no answer (the handshake or the first read fails).
    let refused = https_call(m.admin, &pki, None, "GET", "/status", None).await;
    assert!(refused.is_err(), "answered without a client certificate");
    // Cleartext to the HTTPS port: no HTTP answer.
    let tcp = tokio::net::TcpStream::connect(m.admin).await.unwrap();
    let plain = async {
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        let req = http::Request::get("/status")
            .header("host", "admin")
            .body(Full::new(Bytes::new()))
            .unwrap();
        sender.send_request(req).await
    };
    assert!(
        tokio::time::timeout(std::time::Duration::from_secs(15), plain)
            .await
            .is_ok_and(|r| r.is_err()),
        "cleartext HTTP got an answer from the HTTPS admin listener"
    );

    // A renewed certificate in place, and a reload: the next connection gets it, on the
    // same socket.
    pki_issue(&pki, "admin");
    let (status, body, _) = https_call(
        m.admin,
        &pki,
        Some("operator"),
        "POST",
        "/api/v1/reload",
        Some(TOKEN),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, _, renewed) = https_call(m.admin, &pki, Some("operator"), "GET", "/metrics", None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_ne!(renewed, first, "the renewed certificate is served");
}

/// `/metrics` of a gateway with most sections in use (a cache, a mirror, a rate limit, Lua,
/// API keys, health checks, tracing, a controller), after some traffic: every line is a
/// `# HELP`, a `# TYPE` or a sample of the family just declared, each family is declared
/// once with its help before its type, labels are well formed, histograms are cumulative,
/// and the families of each section are there.
#[tokio::test]
async fn the_metrics_exposition_is_well_formed_for_every_section() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("keys"),
        format!("{}\n", sluice_auth::key_line("ios", b"k-ios-0123456789")),
    )
    .unwrap();
    let origin = Origin::start("o").await;
    let text = format!(
        r#"[admin]
address = "127.0.0.1:0"
token_file = "admin.token"
[lua]
shared_dicts = {{ small = "8k" }}
[tracing]
endpoint = "http://127.0.0.1:9"
sample_percent = 100
[[listener]]
name = "http"
address = "127.0.0.1:0"
[[upstream]]
name = "o"
servers = [{{ address = "{origin}" }}]
[upstream.health_check]
path = "/healthz"
interval = "100ms"
[[route]]
name = "cached"
path_prefix = "/c/"
upstream = "o"
[route.cache]
default_ttl = "1m"
[[route.mirror]]
upstream = "o"
[[route]]
name = "limited"
path_prefix = "/l/"
upstream = "o"
rate_limit = {{ rate = "100/s", burst = 10 }}
[route.lua]
access = 'ngx.req.set_header("X-Lua", "1")'
[[route]]
name = "keys"
path_prefix = "/keys/"
upstream = "o"
[route.auth]
keys = {{ file = "keys", query = "api_key" }}
"#,
        origin = origin.addr
    );
    let m = Managed::start(dir, &text).await;
    for path in [
        "/c/a",
        "/c/a",
        "/l/b",
        "/keys/x?api_key=k-ios-0123456789",
        "/keys/y",
    ] {
        http1_get(m.http(), "x", path).await;
    }
    // The mirror's copies are sent in the background.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (status, _, body) = m.call("GET", "/metrics", None, &[]).await;
    assert_eq!(status, 200);
    let Value::String(text) = body else {
        panic!("/metrics is not text: {body}")
    };
    let families = exposition_families(&text);
    for want in [
        "sluice_tls_handshakes_total",
        "sluice_http_request_duration_seconds",
        "sluice_rate_limit_requests_total",
        "sluice_offload_jobs_submitted_total",
        "sluice_compress_bytes_out_total",
        "sluice_cache_requests_total",
        "sluice_mirror_response_seconds",
        "sluice_auth_allowed_total",
        "sluice_lua_call_seconds",
        "sluice_tracing_spans_total",
        "sluice_request_log_entries",
        "sluice_upstream_server_up",
        "sluice_config_loaded_timestamp_seconds",
    ] {
        assert!(families.iter().any(|f| f == want), "no {want} in\n{text}");
    }
}

/// Checks the Prometheus text format line by line; returns the families declared.
fn exposition_families(text: &str) -> Vec<String> {
    let mut families: Vec<String> = Vec::new();
    let mut current: Option<(String, String)> = None;
    let mut help: Option<String> = None;
    // A histogram's or summary's series: its buckets so far, by its other labels.
    let mut buckets: std::collections::HashMap<String, f64> = Default::default();
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, doc) = rest.split_once(' ').expect(line);
            assert!(!doc.is_empty() && help.is_none(), "{line}");
            assert!(!families.iter().any(|f| f == name), "{name} declared twice");
            help = Some(name.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect(line);
            assert_eq!(
                help.take().as_deref(),
                Some(name),
                "HELP before TYPE: {line}"
            );
            assert!(
                ["counter", "gauge", "histogram", "summary"].contains(&kind),
                "{line}"
            );
            families.push(name.to_owned());
            current = Some((name.to_owned(), kind.to_owned()));
            buckets.clear();
            continue;
        }
        assert!(help.is_none(), "a HELP without its TYPE before {line}");
        let (series, value) = line.rsplit_once(' ').expect(line);
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value of {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').expect(line)),
            None => (series, ""),
        };
        let labels = exposition_labels(labels, line);
        let (family, kind) = current.as_ref().expect("a sample before any family");
        let suffix = name.strip_prefix(family.as_str()).expect(line);
        match kind.as_str() {
            "histogram" => assert!(["_bucket", "_sum", "_count"].contains(&suffix), "{line}"),
            "summary" => assert!(["_sum", "_count", ""].contains(&suffix), "{line}"),
            _ => assert_eq!(suffix, "", "{line}"),
        }
        if suffix == "_bucket" {
            let others: Vec<_> = labels.iter().filter(|(k, _)| k != "le").collect();
            let key = format!("{others:?}");
            let before = buckets.insert(key, value).unwrap_or(0.0);
            assert!(value >= before, "buckets are cumulative: {line}");
        }
    }
    assert!(help.is_none(), "a HELP without its TYPE at the end");
    families
}

/// `k="v",k="v"` as pairs, each value unescaped; panics on anything else.
fn exposition_labels(mut s: &str, line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while !s.is_empty() {
        let (key, rest) = s.split_once("=\"").expect(line);
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "label name in {line}"
        );
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next().expect(line) {
                (i, '"') => break i,
                (_, '\\') => match chars.next().expect(line).1 {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    c => panic!("escape \\{c} in {line}"),
                },
                (_, c) => value.push(c),
            }
        };
        out.push((key.to_owned(), value));
        s = &rest[end + 1..];
        s = s.strip_prefix(',').unwrap_or(s);
    }
    out
}
