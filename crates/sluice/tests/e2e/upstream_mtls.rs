//! Mutual TLS to upstreams (`[upstream.tls] client_cert`, `client_key`): an origin that
//! requires a client certificate from its CA gets the gateway's, and a group without one is
//! refused by the origin's handshake.

use crate::layer4::{acceptor, exchange, issued, naming_tls_server};
use crate::support::*;
use boring::ssl::SslVerifyMode;

#[tokio::test]
async fn an_upstream_that_requires_a_client_certificate_gets_the_gateways() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The origin's certificate and the gateway's client certificate, from one CA.
    let (cert, key) = issued(d, "db.internal");
    let ca = boring::x509::X509::from_pem(&std::fs::read(d.join("ca.crt")).unwrap()).unwrap();
    let ca_key =
        boring::pkey::PKey::private_key_from_pem(&std::fs::read(d.join("ca.key")).unwrap())
            .unwrap();
    issue(d, "gateway", "sluice gateway", Some((&ca, &ca_key)), &[]);
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        d.join("gateway.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let mut b =
        boring::ssl::SslAcceptor::mozilla_intermediate_v5(boring::ssl::SslMethod::tls()).unwrap();
    b.set_certificate(&cert).unwrap();
    b.set_private_key(&key).unwrap();
    b.cert_store_mut().add_cert(ca.clone()).unwrap();
    b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
    let origin = naming_tls_server(b.build(), "mutual origin").await;
    // The same origin without the requirement answers anyone (the control).
    let open = naming_tls_server(acceptor(&cert, &key), "open origin").await;
    let gw = TestGateway::start(
        &format!(
            r#"
[[listener]]
name = "with-cert"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "with-cert"
[[listener]]
name = "without"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "without"
[[listener]]
name = "open"
address = "127.0.0.1:0"
kind = "tcp"
upstream = "open"
[[upstream]]
name = "with-cert"
servers = [{{ address = "{origin}" }}]
[upstream.tls]
server_name = "db.internal"
ca = "ca.crt"
client_cert = "gateway.crt"
client_key = "gateway.key"
[[upstream]]
name = "without"
servers = [{{ address = "{origin}" }}]
[upstream.tls]
server_name = "db.internal"
ca = "ca.crt"
[[upstream]]
name = "open"
servers = [{{ address = "{open}" }}]
[upstream.tls]
server_name = "db.internal"
ca = "ca.crt"
"#
        ),
        dir,
    )
    .await;
    assert_eq!(exchange(gw.addr("with-cert"), b"").await, "mutual origin");
    assert_eq!(exchange(gw.addr("without"), b"").await, "");
    assert_eq!(exchange(gw.addr("open"), b"").await, "open origin");
}

/// An HTTPS origin (HTTP/1.1 and HTTP/2 by ALPN) that requires a client certificate of its
/// CA and answers with the protocol and the certificate's subject.
async fn mutual_https_origin(mut b: boring::ssl::SslAcceptorBuilder) -> std::net::SocketAddr {
    b.set_alpn_select_callback(|_, client| {
        boring::ssl::select_next_proto(b"\x02h2\x08http/1.1", client)
            .ok_or(boring::ssl::AlpnError::NOACK)
    });
    let acceptor = b.build();
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = socket.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = tokio_boring::accept(&acceptor, tcp).await else {
                    return;
                };
                let who = tls
                    .ssl()
                    .peer_certificate()
                    .and_then(|c| {
                        c.subject_name()
                            .entries_by_nid(boring::nid::Nid::COMMONNAME)
                            .next()
                            .and_then(|e| e.data().as_utf8().ok().map(|s| s.to_string()))
                    })
                    .unwrap_or_default();
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let text = format!("{:?} from {who}", req.version());
                        async move {
                            Ok::<_, std::convert::Infallible>(http::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from(text)),
                            ))
                        }
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                .await;
            });
        }
    });
    addr
}

/// Mutual TLS to HTTP upstreams, both protocols: the gateway's certificate reaches an HTTPS
/// origin that requires it over HTTP/1.1 and over HTTP/2 (ALPN h2), and a group without one
/// gets the origin's refusal as 502.
#[tokio::test]
async fn http1_and_http2_upstreams_present_the_gateways_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (cert, key) = issued(d, "api.internal");
    let ca = boring::x509::X509::from_pem(&std::fs::read(d.join("ca.crt")).unwrap()).unwrap();
    let ca_key =
        boring::pkey::PKey::private_key_from_pem(&std::fs::read(d.join("ca.key")).unwrap())
            .unwrap();
    issue(d, "gateway", "sluice gateway", Some((&ca, &ca_key)), &[]);
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        d.join("gateway.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let mut b =
        boring::ssl::SslAcceptor::mozilla_intermediate_v5(boring::ssl::SslMethod::tls()).unwrap();
    b.set_certificate(&cert).unwrap();
    b.set_private_key(&key).unwrap();
    b.cert_store_mut().add_cert(ca.clone()).unwrap();
    b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
    let origin = mutual_https_origin(b).await;
    let group = |name: &str, protocol: &str, with_cert: bool| {
        let cert = if with_cert {
            "client_cert = \"gateway.crt\"\nclient_key = \"gateway.key\"\n"
        } else {
            ""
        };
        format!(
            "[[upstream]]\nname = \"{name}\"\nprotocol = \"{protocol}\"\n\
             servers = [{{ address = \"{origin}\" }}]\n[upstream.tls]\n\
             server_name = \"api.internal\"\nca = \"ca.crt\"\n{cert}\
             [[route]]\nname = \"{name}\"\npath_prefix = \"/{name}\"\nupstream = \"{name}\"\n"
        )
    };
    let gw = TestGateway::start(
        &format!(
            "[[listener]]\nname = \"web\"\naddress = \"127.0.0.1:0\"\n{}{}{}",
            group("h1", "http1", true),
            group("h2", "h2", true),
            group("anon", "http1", false)
        ),
        dir,
    )
    .await;
    let web = gw.addr("web");
    let h1 = http1_get(web, "x", "/h1").await;
    assert_eq!(
        (h1.status, h1.body.as_str()),
        (200, "HTTP/1.1 from sluice gateway")
    );
    let h2 = http1_get(web, "x", "/h2").await;
    assert_eq!(
        (h2.status, h2.body.as_str()),
        (200, "HTTP/2.0 from sluice gateway")
    );
    assert_eq!(http1_get(web, "x", "/anon").await.status, 502);
}
