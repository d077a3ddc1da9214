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
