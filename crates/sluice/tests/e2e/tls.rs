use crate::support::*;
use boring::ssl::SslVersion;
use bytes::Bytes;
use http_body_util::Full;
use sluice_tls::selfsigned::KeyKind;

/// a.test has RSA and ECDSA certificates; b.test only ECDSA; the default is b's.
async fn tls_gateway(extra_tls: &str) -> (TestGateway, Origin) {
    let origin = Origin::start("origin").await;
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a-rsa", KeyKind::Rsa2048, &["a.test"]);
    write_cert(dir.path(), "a-ec", KeyKind::EcdsaP256, &["a.test"]);
    write_cert(
        dir.path(),
        "b-ec",
        KeyKind::EcdsaP256,
        &["b.test", "*.b.test"],
    );
    let cfg = format!(
        r#"
[log]
access_log = "off"
[[listener]]
name = "https"
address = "127.0.0.1:0"
[listener.tls]
certificates = ["a-rsa", "a-ec", "b-ec"]
default_certificate = "b-ec"
{extra_tls}
[[certificate]]
name = "a-rsa"
cert = "a-rsa.crt"
key = "a-rsa.key"
[[certificate]]
name = "a-ec"
cert = "a-ec.crt"
key = "a-ec.key"
[[certificate]]
name = "b-ec"
cert = "b-ec.crt"
key = "b-ec.key"
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

fn subject_cn(h: &Handshake) -> String {
    let cert = h.stream.ssl().peer_certificate().unwrap();
    let cn = cert
        .subject_name()
        .entries_by_nid(boring::nid::Nid::COMMONNAME)
        .next()
        .unwrap();
    cn.data().as_utf8().unwrap().to_string()
}

const RSA_ONLY: &str = "RSA-PSS+SHA256:RSA-PSS+SHA384:RSA+SHA256:RSA+SHA384";

#[tokio::test]
async fn sni_and_signature_algorithms_pick_the_certificate() {
    let (gw, _o) = tls_gateway("").await;
    let addr = gw.addr("https");
    for version in [SslVersion::TLS1_3, SslVersion::TLS1_2] {
        let ec = tls_connect(
            addr,
            &ClientOpts {
                sni: Some("a.test"),
                max_version: Some(version),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert!(
            !ec.key_is_rsa,
            "{version:?}: a client with ECDSA support gets ECDSA"
        );
        assert_eq!(subject_cn(&ec), "a.test");
        let rsa = tls_connect(
            addr,
            &ClientOpts {
                sni: Some("a.test"),
                sigalgs: Some(RSA_ONLY),
                max_version: Some(version),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert!(rsa.key_is_rsa, "{version:?}: an RSA-only client gets RSA");
        assert_eq!(rsa.key_bits, 2048);
    }
    let b = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("www.b.test"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(subject_cn(&b), "b.test", "wildcard name");
    let unknown = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("nobody.test"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        subject_cn(&unknown),
        "b.test",
        "unknown SNI gets the default certificate"
    );
    let none = tls_connect(addr, &ClientOpts::default()).await.unwrap();
    assert_eq!(
        subject_cn(&none),
        "b.test",
        "no SNI gets the default certificate"
    );
    // b.test has no RSA certificate: an RSA-only client cannot be served.
    assert!(
        tls_connect(
            addr,
            &ClientOpts {
                sni: Some("b.test"),
                sigalgs: Some(RSA_ONLY),
                ..Default::default()
            }
        )
        .await
        .is_err()
    );
    // TLS 1.1 and below are refused.
    assert!(
        tls_connect(
            addr,
            &ClientOpts {
                sni: Some("a.test"),
                max_version: Some(SslVersion::TLS1_1),
                ..Default::default()
            }
        )
        .await
        .is_err()
    );
}

#[tokio::test]
async fn unknown_sni_can_be_rejected() {
    let (gw, _o) = tls_gateway("unknown_sni = \"reject\"").await;
    let addr = gw.addr("https");
    assert!(
        tls_connect(
            addr,
            &ClientOpts {
                sni: Some("a.test"),
                ..Default::default()
            }
        )
        .await
        .is_ok()
    );
    assert!(
        tls_connect(
            addr,
            &ClientOpts {
                sni: Some("nobody.test"),
                ..Default::default()
            }
        )
        .await
        .is_err()
    );
}

#[tokio::test]
async fn alpn_chooses_http2_or_http1() {
    let (gw, _o) = tls_gateway("").await;
    let addr = gw.addr("https");
    let h2 = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            alpn: vec![b"h2", b"http/1.1"],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(h2.alpn_h2);
    let req = http::Request::get("https://a.test/whoami")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let got = http2_send(h2.stream, req).await;
    assert_eq!(
        (got.status, got.version, got.body.as_str()),
        (200, http::Version::HTTP_2, "origin")
    );

    let h1 = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            alpn: vec![b"http/1.1"],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(!h1.alpn_h2);
    let req = http::Request::get("/whoami")
        .header("host", "a.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let got = http1_send(h1.stream, req).await;
    assert_eq!((got.status, got.version), (200, http::Version::HTTP_11));
}

/// Makes one request on a new connection; returns whether it resumed and the ticket it was
/// given (a TLS 1.2 resumption under the current key gets no new ticket).
pub(crate) async fn resumable(
    addr: std::net::SocketAddr,
    version: SslVersion,
    session: Option<boring::ssl::SslSession>,
) -> (bool, Option<boring::ssl::SslSession>) {
    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            max_version: Some(version),
            session,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let resumed = h.stream.ssl().session_reused();
    let slot = h.session.clone();
    let req = http::Request::get("/whoami")
        .header("host", "a.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(http1_send(h.stream, req).await.status, 200);
    let ticket = slot.lock().unwrap().clone();
    (resumed, ticket)
}

#[tokio::test]
async fn sessions_resume_with_tickets_in_tls12_and_tls13() {
    let (gw, _o) = tls_gateway("").await;
    let addr = gw.addr("https");
    for version in [SslVersion::TLS1_2, SslVersion::TLS1_3] {
        let (resumed, ticket) = resumable(addr, version, None).await;
        assert!(!resumed);
        assert!(ticket.is_some(), "{version:?}: the server issued a ticket");
        let (resumed, _) = resumable(addr, version, ticket).await;
        assert!(resumed, "{version:?}: the second connection resumes");
    }
}

#[tokio::test]
async fn a_shared_ticket_key_file_lets_another_instance_resume() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("ticket.key");
    let mut bytes = [0u8; 160];
    boring::rand::rand_bytes(&mut bytes).unwrap();
    std::fs::write(&keys, bytes).unwrap();
    let tls = format!("ticket_key_file = '{}'", keys.display());
    let (one, _o1) = tls_gateway(&tls).await;
    let (two, _o2) = tls_gateway(&tls).await;
    let (_, ticket) = resumable(one.addr("https"), SslVersion::TLS1_3, None).await;
    assert!(ticket.is_some());
    let (resumed, _) = resumable(two.addr("https"), SslVersion::TLS1_3, ticket).await;
    assert!(resumed, "instance two decrypts instance one's ticket");
    // Without the shared file the other instance cannot.
    let (three, _o3) = tls_gateway("").await;
    let (_, ticket) = resumable(one.addr("https"), SslVersion::TLS1_3, None).await;
    assert!(ticket.is_some());
    let (resumed, _) = resumable(three.addr("https"), SslVersion::TLS1_3, ticket).await;
    assert!(!resumed);
}

#[tokio::test]
async fn tickets_can_be_turned_off() {
    let (gw, _o) = tls_gateway("session_tickets = false").await;
    let (_, ticket) = resumable(gw.addr("https"), SslVersion::TLS1_3, None).await;
    assert!(ticket.is_none(), "no TLS 1.3 ticket is issued");
    let (_, session) = resumable(gw.addr("https"), SslVersion::TLS1_2, None).await;
    if let Some(s) = session {
        // A TLS 1.2 client may keep the full-handshake session; it must not resume.
        let (resumed, _) = resumable(gw.addr("https"), SslVersion::TLS1_2, Some(s)).await;
        assert!(!resumed);
    }
}

#[tokio::test]
async fn the_access_log_records_tls_and_upstream_facts() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.json");
    let origin = Origin::start("logged").await;
    write_cert(dir.path(), "c", KeyKind::EcdsaP256, &["a.test"]);
    let cfg = format!(
        r#"
[log]
access_log = '{log}'
access_format = "json"
[[listener]]
name = "https"
address = "127.0.0.1:0"
[listener.tls]
[[certificate]]
name = "c"
cert = "c.crt"
key = "c.key"
[[upstream]]
name = "o"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "main"
upstream = "o"
"#,
        log = log.display(),
        origin = origin.addr
    );
    let snapshot = std::sync::Arc::new(sluice_config::load_str(&cfg, "t", dir.path()).unwrap());
    let gw = sluice_proxy::Gateway::start(snapshot).await.unwrap();
    let addr = gw.local_addr("https").unwrap();
    let h = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("a.test"),
            alpn: vec![b"h2"],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let req = http::Request::post("https://a.test/upload?x=1")
        .body(Full::new(Bytes::from_static(b"12345")))
        .unwrap();
    assert_eq!(http2_send(h.stream, req).await.status, 200);
    let mut line = String::new();
    for _ in 0..500 {
        line = std::fs::read_to_string(&log).unwrap_or_default();
        if line.ends_with('\n') {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert_eq!(v["status"], 200);
    assert_eq!(v["method"], "POST");
    assert_eq!(v["path"], "/upload?x=1");
    assert_eq!(v["host"], "a.test");
    assert_eq!(v["protocol"], "HTTP/2.0");
    assert_eq!(v["route"], "main");
    assert_eq!(v["bytes_in"], 5);
    assert_eq!(v["bytes_out"], "logged got 5 bytes".len());
    assert_eq!(v["upstream"], origin.addr.to_string());
    assert_eq!(v["tls_version"], "TLSv1.3");
    assert_eq!(v["tls_resumed"], false);
    assert!(v["tls_cipher"].as_str().unwrap().starts_with("TLS_"));
    assert!(v["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(v["duration_ms"].as_f64().is_some() && v["upstream_ms"].as_f64().is_some());
    gw.shutdown(std::time::Duration::from_secs(5)).await;
}

/// `groups` limits the key exchange: by default the hybrid post-quantum group is agreed with
/// a client that offers it; a listener set to classic groups agrees one of them (the client's
/// key share is retried); a client that offers none of a listener's groups is refused.
#[tokio::test]
async fn key_exchange_groups_follow_the_listener() {
    let (default, _o) = tls_gateway("").await;
    let h = tls_connect(default.addr("https"), &ClientOpts::default())
        .await
        .unwrap();
    assert_eq!(h.group, "X25519MLKEM768");
    let h = tls_connect(
        default.addr("https"),
        &ClientOpts {
            groups: Some("X25519"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(h.group, "X25519", "a client without ML-KEM still connects");

    // OpenSSL's spellings work; BoringSSL's names are what is agreed.
    let (classic, _o2) = tls_gateway("groups = [\"secp384r1\", \"prime256v1\"]").await;
    let addr = classic.addr("https");
    let h = tls_connect(addr, &ClientOpts::default()).await.unwrap();
    assert!(
        ["P-256", "P-384"].contains(&h.group.as_str()),
        "a classic group, not {}",
        h.group
    );
    assert!(
        tls_connect(
            addr,
            &ClientOpts {
                groups: Some("X25519:X25519MLKEM768"),
                ..Default::default()
            },
        )
        .await
        .is_err(),
        "no group in common: refused"
    );
    let h = tls_connect(
        addr,
        &ClientOpts {
            groups: Some("X25519:P-384"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(h.group, "P-384");
}
