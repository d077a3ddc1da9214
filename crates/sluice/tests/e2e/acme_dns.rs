//! ACME beyond HTTP: the dns-01 challenge answered by RFC 2136 updates signed with TSIG to
//! a real authoritative server (Debian's Knot, started on 127.0.0.1 with a zone and key of
//! the test's own), which Pebble asks for the TXT records; wildcard names; External Account
//! Binding with Pebble requiring it; and ACME Renewal Information (RFC 9773) calling for a
//! renewal before Sluice's own schedule would.

use crate::acme::{Gw, Pebble, served, until};
use crate::support::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The HMAC key Pebble gives account `kid-1` (base64url, as a CA shows it).
const EAB_KEY: &str = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";

/// Knot, authoritative for one zone, taking updates signed with one TSIG key.
struct Knot {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Knot {
    async fn start(zone: &str) -> Knot {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut secret = [0u8; 32];
        boring::rand::rand_bytes(&mut secret).unwrap();
        let secret = boring::base64::encode_block(&secret);
        let d = dir.path().display();
        let conf = format!(
            "server:\n    rundir: \"{d}\"\n    listen: 127.0.0.1@{port}\n\
             database:\n    storage: \"{d}/db\"\n\
             key:\n  - id: acme-update\n    algorithm: hmac-sha256\n    secret: {secret}\n\
             acl:\n  - id: update\n    key: acme-update\n    action: update\n\
             template:\n  - id: default\n    storage: \"{d}\"\n    file: \"%s.zone\"\n\
             zone:\n  - domain: {zone}\n    acl: update\n\
             log:\n  - target: stderr\n    any: info\n"
        );
        std::fs::write(dir.path().join("knot.conf"), conf).unwrap();
        // Knot keeps its journal there, and fails every update (SERVFAIL) without it.
        std::fs::create_dir(dir.path().join("db")).unwrap();
        std::fs::write(
            dir.path().join(format!("{zone}.zone")),
            format!(
                "$ORIGIN {zone}.\n$TTL 60\n@ SOA ns.{zone}. hostmaster.{zone}. 1 3600 600 86400 60\n@ NS ns\nns A 127.0.0.1\n"
            ),
        )
        .unwrap();
        // The clause `tsig-keygen` / `keymgr -t` writes, which Sluice reads as its key file.
        std::fs::write(
            dir.path().join("update.key"),
            format!(
                "key \"acme-update\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{secret}\";\n}};\n"
            ),
        )
        .unwrap();
        let knotd = ["/usr/sbin/knotd", "knotd"]
            .into_iter()
            .find(|p| Command::new(p).arg("--version").output().is_ok())
            .expect("knotd is needed (scripts/test-deps installs Debian's knot)");
        let log = std::fs::File::create(dir.path().join("knot.log")).unwrap();
        let child = Command::new(knotd)
            .arg("-c")
            .arg(dir.path().join("knot.conf"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("knotd starts");
        let k = Knot { child, port, dir };
        for _ in 0..250 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return k;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("knotd did not listen within 5 s:\n{}", k.log());
    }

    fn key_file(&self) -> PathBuf {
        self.dir.path().join("update.key")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("knot.log")).unwrap_or_default()
    }

    /// The TXT values Knot answers at `name` (asked with its own kdig).
    fn txt(&self, name: &str) -> Vec<String> {
        let out = Command::new("kdig")
            .arg("@127.0.0.1")
            .args(["-p", &self.port.to_string(), "+tcp", "+short", "TXT", name])
            .output()
            .expect("kdig is needed (scripts/test-deps installs Debian's knot-dnsutils)");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().trim_matches('"').to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    }
}

impl Drop for Knot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gateway serving one ACME certificate `site` (`acme`: its inline table) on an HTTPS
/// listener at `https`.
fn config(dir: &Path, pebble: &Pebble, https: u16, origin: SocketAddr, acme: &str) -> String {
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
retry_min = "500ms"
retry_max = "2s"
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

/// Knot for `acme.test`, Pebble asking it (with `pebble`'s settings), an origin, and the
/// gateway's directory and HTTPS port: what every test here starts with.
struct Scene {
    knot: Knot,
    pebble: Pebble,
    origin: Origin,
    dir: tempfile::TempDir,
    https: u16,
}

impl Scene {
    /// `dir`: the gateway's directory (made before, when a test needs its path first).
    async fn start(dir: tempfile::TempDir, validity_s: u64, pebble: serde_json::Value) -> Scene {
        let knot = Knot::start("acme.test").await;
        let pebble =
            Pebble::start_with(knot.port, free_port(), free_port(), validity_s, 0, pebble).await;
        Scene {
            knot,
            pebble,
            origin: Origin::start("origin").await,
            dir,
            https: free_port(),
        }
    }

    /// A dns-01 order for `names` (a TOML array) through Knot with its key file, and `more`.
    fn dns01(&self, names: &str, more: &str) -> String {
        format!(
            r#"{{ names = {names}, challenge = "dns-01", dns = {{ server = "127.0.0.1:{}", secret_file = "{}" }}{more} }}"#,
            self.knot.port,
            self.knot.key_file().display()
        )
    }

    /// The gateway's configuration for the order `acme`.
    fn config(&self, acme: &str) -> String {
        config(
            self.dir.path(),
            &self.pebble,
            self.https,
            self.origin.addr,
            acme,
        )
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.https))
    }
}

/// The DNS names a handshake for `sni` is served.
async fn served_names(addr: SocketAddr, sni: &'static str) -> Vec<String> {
    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some(sni),
            ..ClientOpts::default()
        },
    )
    .await
    .unwrap();
    let cert = h.stream.ssl().peer_certificate().unwrap();
    cert.subject_alt_names()
        .map(|s| {
            s.iter()
                .filter_map(|n| n.dnsname().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dns01_orders_a_wildcard_through_knot_with_eab_and_removes_its_records() {
    // Pebble asks Knot for the TXT records, and refuses accounts without EAB.
    let scene = Scene::start(
        tempfile::tempdir().unwrap(),
        3600,
        serde_json::json!({
            "externalAccountBindingRequired": true,
            "externalAccountMACKeys": { "kid-1": EAB_KEY },
        }),
    )
    .await;
    let (knot, pebble, dir) = (&scene.knot, &scene.pebble, &scene.dir);
    let acme = scene.dns01(
        r#"["*.acme.test", "acme.test"]"#,
        &format!(r#", eab = {{ kid = "kid-1", hmac_key = "{EAB_KEY}" }}"#),
    );
    let gw = Gw::start(dir.path(), &scene.config(&acme));
    let addr = scene.addr();
    let report = || {
        format!(
            "gateway:\n{}\npebble:\n{}\nknot:\n{}",
            gw.stderr(),
            pebble.log(),
            knot.log()
        )
    };

    until(Duration::from_secs(60), report, || async {
        served(addr, "any.acme.test").await.0.contains("Pebble")
    })
    .await;
    // One certificate for the wildcard and the apex, served to both.
    let mut names = served_names(addr, "acme.test").await;
    names.sort();
    assert_eq!(names, ["*.acme.test", "acme.test"]);
    assert!(served(addr, "acme.test").await.0.contains("Pebble"));
    let status = gw.acme("site").await;
    assert_eq!(status["state"], "issued", "{status}");
    assert_eq!(status["challenge"], "dns-01");
    // Both answers went to Knot as signed updates (the apex and the wildcard share the
    // record name), and both are gone once the order is over.
    assert!(knot.log().contains("DDNS"), "{}", knot.log());
    until(Duration::from_secs(10), report, || async {
        knot.txt("_acme-challenge.acme.test").is_empty()
    })
    .await;
    // The account was bound to the CA's with the EAB key (Pebble refuses it otherwise).
    assert!(
        !pebble.log().contains("externalAccountRequired"),
        "{}",
        pebble.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dns01_with_a_key_the_server_refuses_fails_clearly_and_keeps_the_placeholder() {
    let scene = Scene::start(tempfile::tempdir().unwrap(), 3600, serde_json::json!({})).await;
    let knot = &scene.knot;
    // Right name and algorithm, wrong secret.
    let acme = format!(
        r#"{{ names = ["b.acme.test"], challenge = "dns-01", dns = {{ server = "127.0.0.1:{}", key_name = "acme-update", secret = "d3Jvbmcgc2VjcmV0IHdyb25nIHNlY3JldA==" }} }}"#,
        knot.port
    );
    let gw = Gw::start(scene.dir.path(), &scene.config(&acme));
    let addr = scene.addr();
    until(
        Duration::from_secs(30),
        || format!("gateway:\n{}\nknot:\n{}", gw.stderr(), knot.log()),
        || async {
            let s = gw.acme("site").await;
            s["failures"].as_u64().unwrap_or(0) >= 1
        },
    )
    .await;
    let s = gw.acme("site").await;
    let error = s["last_error"].as_str().unwrap_or_default().to_owned();
    assert!(error.contains("TSIG key"), "{s}");
    assert!(knot.txt("_acme-challenge.b.acme.test").is_empty());
    // The placeholder keeps serving; nothing from the CA.
    assert!(!served(addr, "b.acme.test").await.0.contains("Pebble"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewal_window_the_ca_moves_into_the_past_renews_at_once() {
    // A day's certificate: by Sluice's own schedule, not due for 16 hours.
    let scene = Scene::start(tempfile::tempdir().unwrap(), 86_400, serde_json::json!({})).await;
    let (pebble, dir) = (&scene.pebble, &scene.dir);
    let text = scene.config(&scene.dns01(r#"["ari.acme.test"]"#, ""));
    let addr = scene.addr();
    let first = {
        let gw = Gw::start(dir.path(), &text);
        until(
            Duration::from_secs(60),
            || gw.stderr(),
            || async { served(addr, "ari.acme.test").await.0.contains("Pebble") },
        )
        .await;
        served(addr, "ari.acme.test").await.1
    };

    // The CA says: renew now (what it says for a certificate it will revoke).
    let pem = std::fs::read_to_string(dir.path().join("acme/site/cert.pem")).unwrap();
    let window =
        r#"{"suggestedWindow":{"start":"2020-01-01T00:00:00Z","end":"2020-01-02T00:00:00Z"}}"#;
    let body = serde_json::json!({ "Certificate": pem, "ARIResponse": window }).to_string();
    let out = Command::new("curl")
        .args(["-sS", "--fail", "-X", "POST", "--cacert"])
        .arg(pebble.ca_file())
        .arg(pebble.management_url("/set-renewal-info/"))
        .args(["-d", &body])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Restarted on the same storage, the gateway asks the CA and renews at once.
    let gw = Gw::start(dir.path(), &text);
    until(
        Duration::from_secs(60),
        || format!("gateway:\n{}\npebble:\n{}", gw.stderr(), pebble.log()),
        || async { served(addr, "ari.acme.test").await.1 != first },
    )
    .await;
    assert!(
        gw.stderr().contains("the CA suggests a renewal window"),
        "{}",
        gw.stderr()
    );
    assert_eq!(gw.acme("site").await["issued"], 1);
}

/// GETs `url` from Pebble's management API into `to`.
fn pebble_get(pebble: &Pebble, path: &str, to: &Path) {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(pebble.ca_file())
        .arg(pebble.management_url(path))
        .arg("-o")
        .arg(to)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_acme_certificate_is_ocsp_stapled_like_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = tempfile::tempdir().unwrap();
    std::fs::write(ca.path().join("index.txt"), "").unwrap();
    // The responder answers for what the gateway stored: its index names that serial.
    let stored = dir.path().join("acme/site/cert.pem");
    let index = ca.path().join("index.txt");
    let before = std::sync::Arc::new(move || {
        let Ok(pem) = std::fs::read(&stored) else {
            return;
        };
        let Ok(leaf) = boring::x509::X509::from_pem(&pem) else {
            return;
        };
        let mut serial = leaf
            .serial_number()
            .to_bn()
            .unwrap()
            .to_hex_str()
            .unwrap()
            .to_uppercase();
        if !serial.len().is_multiple_of(2) {
            serial.insert(0, '0');
        }
        std::fs::write(
            &index,
            format!("V\t301231000000Z\t\t{serial}\tunknown\t/CN=site\n"),
        )
        .unwrap();
    });
    let responder = crate::ocsp::Responder::start_with(ca.path().to_path_buf(), before).await;
    let scene = Scene::start(
        dir,
        3600,
        serde_json::json!({ "ocspResponderURL": format!("http://{}/", responder.addr) }),
    )
    .await;
    let pebble = &scene.pebble;
    // Pebble's intermediate signs the leaf, so it signs the answers too.
    pebble_get(pebble, "/intermediates/0", &ca.path().join("ca.crt"));
    pebble_get(pebble, "/intermediate-keys/0", &ca.path().join("ca.key"));
    let acme = scene.dns01(r#"["ocsp.acme.test"]"#, "");
    let gw = Gw::start(scene.dir.path(), &scene.config(&acme));
    let addr = scene.addr();
    until(
        Duration::from_secs(60),
        || format!("gateway:\n{}\npebble:\n{}", gw.stderr(), pebble.log()),
        || async { crate::ocsp::staple(addr, "ocsp.acme.test").await.is_some() },
    )
    .await;
    let der = crate::ocsp::staple(addr, "ocsp.acme.test").await.unwrap();
    let text = crate::ocsp::read_response(ca.path(), &der);
    assert!(text.contains("Cert Status: good"), "{text}");
    // The staple is for the certificate served (Pebble's, not the placeholder).
    assert!(served(addr, "ocsp.acme.test").await.0.contains("Pebble"));
    let status = gw.status().await;
    let entry = status["ocsp"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["certificate"] == "site").cloned())
        .unwrap_or_default();
    assert_eq!(entry["stapled"], true, "{status}");
}
