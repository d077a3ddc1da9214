//! Host and SNI agree where it matters: on a listener that requires client certificates, a
//! certificate for another name that does not (`client_auth = "off"`) must not let a client
//! reach the protected site by sending that name in SNI and the protected one in `Host`.
//! Debian's NGINX with two `server` blocks (one `ssl_verify_client on`, one off) answers
//! 421 Misdirected Request; Sluice must answer as NGINX does, over HTTP/1.1 and HTTP/2 (where
//! a connection may be reused for several names).

use crate::differential::{Child, nginx_with, wait_listening};
use crate::support::*;
use bytes::Bytes;
use http_body_util::Full;
use std::net::SocketAddr;
use std::path::Path;

/// The test PKI: a client CA with one client (alice), and server certificates for
/// open.test and secure.test.
fn make_pki(d: &Path) {
    issue(d, "ca", "Test Client CA", None, &[]);
    let ca = boring::x509::X509::from_pem(&std::fs::read(d.join("ca.crt")).unwrap()).unwrap();
    let key = boring::pkey::PKey::private_key_from_pem(&std::fs::read(d.join("ca.key")).unwrap())
        .unwrap();
    issue(
        d,
        "alice",
        "alice",
        Some((&ca, &key)),
        &["alice.clients.test"],
    );
    issue(d, "open", "open.test", Some((&ca, &key)), &["open.test"]);
    issue(
        d,
        "secure",
        "secure.test",
        Some((&ca, &key)),
        &["secure.test"],
    );
}

fn sluice_config(origin: SocketAddr) -> String {
    format!(
        r#"
[[listener]]
name = "https"
address = "127.0.0.1:0"
protocols = ["h2", "http/1.1"]
[listener.tls]
certificates = ["secure", "open"]
client_auth = "required"
client_ca = "ca.crt"
[[certificate]]
name = "secure"
cert = "secure.crt"
key = "secure.key"
[[certificate]]
name = "open"
cert = "open.crt"
key = "open.key"
client_auth = "off"
[[upstream]]
name = "o"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "all"
upstream = "o"
"#
    )
}

fn start_nginx(d: &Path, port: u16, origin: SocketAddr) -> Child {
    let dir = d.display();
    let servers = format!(
        r#"
    server {{
        listen 127.0.0.1:{port} ssl http2 default_server;
        server_name secure.test;
        ssl_certificate {dir}/secure.crt;
        ssl_certificate_key {dir}/secure.key;
        ssl_client_certificate {dir}/ca.crt;
        ssl_verify_client on;
        location / {{ proxy_pass http://{origin}; }}
    }}
    server {{
        listen 127.0.0.1:{port} ssl http2;
        server_name open.test;
        ssl_certificate {dir}/open.crt;
        ssl_certificate_key {dir}/open.key;
        ssl_client_certificate {dir}/ca.crt;
        ssl_verify_client off;
        location / {{ proxy_pass http://{origin}; }}
    }}"#
    );
    nginx_with(d, &servers, false, "warn")
}

/// The status of a GET for `host` on a connection made with `sni` (and alice's certificate
/// when `cert`), over HTTP/2 when `h2`; 0 when the handshake failed.
async fn status(
    addr: SocketAddr,
    d: &Path,
    sni: &'static str,
    host: &str,
    cert: bool,
    h2: bool,
) -> u16 {
    let opts = ClientOpts {
        sni: Some(sni),
        alpn: vec![if h2 { b"h2" } else { b"http/1.1" }],
        client_cert: cert.then(|| (d.join("alice.crt"), d.join("alice.key"))),
        ..ClientOpts::default()
    };
    let Ok(hs) = tls_connect(addr, &opts).await else {
        return 0;
    };
    if h2 {
        assert!(hs.alpn_h2, "{sni}: h2 negotiated");
        let req = http::Request::get(format!("https://{host}/whoami"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        http2_send(hs.stream, req).await.status
    } else {
        let req = http::Request::get("/whoami")
            .header("host", host)
            .body(Full::new(Bytes::new()))
            .unwrap();
        http1_send(hs.stream, req).await.status
    }
}

#[tokio::test]
async fn a_host_whose_certificate_settings_differ_from_the_sni_names_is_misdirected() {
    let origin = Origin::start("o").await;
    let dir = tempfile::tempdir().unwrap();
    make_pki(dir.path());
    let ngx_dir = tempfile::tempdir().unwrap();
    for f in ["ca.crt", "open.crt", "open.key", "secure.crt", "secure.key"] {
        std::fs::copy(dir.path().join(f), ngx_dir.path().join(f)).unwrap();
    }
    let d = dir.path().to_owned();
    let gw = TestGateway::start(&sluice_config(origin.addr), dir).await;
    let port = free_port();
    let _nginx = start_nginx(ngx_dir.path(), port, origin.addr);
    let nginx: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_listening(nginx).await;

    // (SNI, Host, a client certificate sent, what NGINX answers, what Sluice answers).
    let cases = [
        ("open.test", "open.test", false, 200, 200),
        ("open.test", "secure.test", false, 421, 421),
        ("open.test", "secure.test:443", false, 421, 421),
        ("open.test", "SECURE.test", false, 421, 421),
        ("open.test", "secure.test", true, 421, 421),
        ("secure.test", "secure.test", true, 200, 200),
        ("secure.test", "secure.test", false, 400, 400),
        // A site that asks for no certificate is served on a connection that sent one.
        ("secure.test", "open.test", true, 200, 200),
        // The one difference, by design: other.test has the listener's settings (required),
        // which the handshake for secure.test applied, so its certificate was checked as
        // other.test asks. NGINX refuses any Host but the SNI name on a server that verifies
        // (which also refuses HTTP/2 requests a browser coalesces onto a verified
        // connection); Sluice serves it.
        ("secure.test", "other.test", true, 421, 200),
    ];
    let mut table = String::new();
    let mut wrong = Vec::new();
    for (sni, host, cert, nginx_says, sluice_says) in cases {
        for h2 in [false, true] {
            let theirs = status(nginx, &d, sni, host, cert, h2).await;
            let ours = status(gw.addr("https"), &d, sni, host, cert, h2).await;
            let row = format!(
                "sni {sni:<12} host {host:<16} cert {cert:<5} h2 {h2:<5} nginx {theirs} sluice {ours}\n"
            );
            table.push_str(&row);
            if theirs != nginx_says || ours != sluice_says {
                wrong.push(row);
            }
        }
    }
    println!("{table}");
    assert!(wrong.is_empty(), "differ from NGINX:\n{}", wrong.concat());
}
