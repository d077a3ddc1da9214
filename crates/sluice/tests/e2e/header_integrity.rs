//! The headers the gateway vouches for reach the origin as the gateway set them
//! (docs/authentication.md, "What an origin can rely on"): a client's `Connection` cannot
//! name them away, a second `Authorization` is refused before anything reads it, and an
//! underscore spelling (`X_Auth_Subject`, which CGI-style origins read as `X-Auth-Subject`)
//! never goes upstream, over HTTP/1.1 and HTTP/2 (h2c), on a listener with the default
//! `underscores_in_headers` and one that keeps underscores. An HTTP/2 request cannot carry
//! `Connection` at all (RFC 9113 §8.2.2), so the `Connection` cases are HTTP/1.1's.

use crate::auth::{Answer, serve, upstream_header};
use crate::support::*;
use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use sluice_tls::selfsigned::KeyKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A forward-authentication service: `Bearer good` is alice (her subject and `X-User`),
/// anything else 401. Counts what it is asked.
async fn auth_service(asked: Arc<AtomicUsize>) -> SocketAddr {
    serve(move |req| {
        asked.fetch_add(1, Ordering::SeqCst);
        let good = req
            .headers()
            .get("authorization")
            .is_some_and(|v| v == "Bearer good");
        let b = Response::builder();
        let b = if good {
            b.status(200)
                .header("x-auth-subject", "alice")
                .header("x-user", "alice")
        } else {
            b.status(401)
        };
        let resp = b.body(Full::new(Bytes::new())).unwrap();
        Box::pin(async move { resp }) as Answer
    })
    .await
}

/// A gateway with two plain listeners, `web` (underscores dropped, the default) and
/// `keeps` (`underscores_in_headers = true`), an authenticated route under `/api/` and an
/// open one; its access log in `{dir}/access.log`, each line written before its response.
async fn gateway(origin: SocketAddr, auth: SocketAddr) -> TestGateway {
    TestGateway::start_logged(
        &format!(
            r#"
[log]
access_log = "{{dir}}/access.log"
access_flush = "0s"
[[listener]]
name = "web"
address = "127.0.0.1:0"
[[listener]]
name = "keeps"
address = "127.0.0.1:0"
underscores_in_headers = true
[[upstream]]
name = "o"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "api"
path_prefix = "/api/"
strip_prefix = "/api"
upstream = "o"
[route.auth]
forward = {{ url = "http://{auth}/check", upstream_headers = ["X-User"], timeout = "2s" }}
[[route]]
name = "open"
upstream = "o"
"#
        ),
        tempfile::tempdir().unwrap(),
    )
    .await
}

/// GET `path` with `headers` on a fresh connection: HTTP/2 with prior knowledge, else
/// HTTP/1.1.
async fn send(addr: SocketAddr, h2: bool, path: &str, headers: &[(&str, &str)]) -> Got {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = if h2 {
        http::Request::get(format!("http://api.test{path}"))
    } else {
        http::Request::get(path).header("host", "api.test")
    };
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::new())).unwrap();
    if h2 {
        http2_send(tcp, req).await
    } else {
        http1_send(tcp, req).await
    }
}

/// The field names the origin received.
fn upstream_names(got: &Got) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(&got.body).unwrap_or_default();
    v["headers"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn connection_cannot_strip_the_headers_the_gateway_sets() {
    let origin = Origin::start("o").await;
    let auth = auth_service(Arc::new(AtomicUsize::new(0))).await;
    let gw = gateway(origin.addr, auth).await;
    let web = gw.addr("web");
    let got = send(
        web,
        false,
        "/api/headers",
        &[
            ("authorization", "Bearer good"),
            (
                "connection",
                "keep-alive, X-Auth-Subject, X-User, X-Request-Id, X-Forwarded-For, X-Real-IP, \
                 X-Forwarded-Proto, X-Forwarded-Host, X-Private",
            ),
            ("x-auth-subject", "root"),
            ("x-user", "root"),
            ("x-private", "hop"),
        ],
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.body);
    let seen = |k: &str| upstream_header(&got, k);
    assert_eq!(
        seen("x-auth-subject").as_deref(),
        Some("alice"),
        "{}",
        got.body
    );
    assert_eq!(seen("x-user").as_deref(), Some("alice"), "{}", got.body);
    assert_eq!(seen("x-forwarded-for").as_deref(), Some("127.0.0.1"));
    assert_eq!(seen("x-real-ip").as_deref(), Some("127.0.0.1"));
    assert_eq!(seen("x-forwarded-proto").as_deref(), Some("http"));
    assert_eq!(seen("x-forwarded-host").as_deref(), Some("api.test"));
    let id = seen("x-request-id").expect("the gateway's request ID went upstream");
    assert_eq!(
        got.headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some(id.as_str()),
        "the same ID came back"
    );
    // A field of the client's own that it named is still a hop-by-hop option.
    assert_eq!(seen("x-private"), None, "{}", got.body);
    assert_eq!(seen("connection"), None);
}

#[tokio::test]
async fn a_second_authorization_is_refused_before_anything_reads_it() {
    let origin = Origin::start("o").await;
    let asked = Arc::new(AtomicUsize::new(0));
    let auth = auth_service(asked.clone()).await;
    let gw = gateway(origin.addr, auth).await;
    for listener in ["web", "keeps"] {
        for h2 in [false, true] {
            for (path, twice) in [
                ("/api/headers", "authorization"),
                ("/headers", "authorization"),
                ("/headers", "proxy-authorization"),
            ] {
                let (hits, checks) = (origin.hits(), asked.load(Ordering::SeqCst));
                let got = send(
                    gw.addr(listener),
                    h2,
                    path,
                    &[(twice, "Bearer good"), (twice, "Bearer other")],
                )
                .await;
                let case = format!("{listener} h2={h2} {path} two {twice}");
                assert_eq!(got.status, 400, "{case}: {}", got.body);
                assert_eq!(origin.hits(), hits, "{case}: the origin was not reached");
                assert_eq!(asked.load(Ordering::SeqCst), checks, "{case}: nor auth");
            }
        }
    }
    // One of each is an ordinary request.
    let got = send(
        gw.addr("web"),
        false,
        "/api/headers",
        &[
            ("authorization", "Bearer good"),
            ("proxy-authorization", "Basic eDp5"),
        ],
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.body);
    // The access log says why.
    let log = gw.dir().join("access.log");
    wait_until(|| {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.matches("refused=duplicate_authorization").count() == 8
            && text
                .matches("refused=duplicate_proxy_authorization")
                .count()
                == 4
    })
    .await;
}

#[tokio::test]
async fn underscore_spellings_never_pass_for_the_gateways_headers() {
    let origin = Origin::start("o").await;
    let auth = auth_service(Arc::new(AtomicUsize::new(0))).await;
    let gw = gateway(origin.addr, auth).await;
    let forged = [
        ("X_Auth_Subject", "admin"),
        ("x_auth-subject", "admin"),
        ("X_User", "admin"),
        ("X_Forwarded_For", "203.0.113.66"),
        ("X_Real_IP", "203.0.113.66"),
        ("X_Request_Id", "forged"),
        ("X_Forwarded_Client_Cert", "Hash=forged"),
        ("X_Custom", "1"),
    ];
    for (listener, keeps) in [("web", false), ("keeps", true)] {
        for h2 in [false, true] {
            let case = format!("{listener} h2={h2}");
            let mut headers = vec![("authorization", "Bearer good")];
            headers.extend(forged);
            let got = send(gw.addr(listener), h2, "/api/headers", &headers).await;
            assert_eq!(got.status, 200, "{case}: {}", got.body);
            assert_eq!(
                upstream_header(&got, "x-auth-subject").as_deref(),
                Some("alice"),
                "{case}"
            );
            let underscored: Vec<_> = upstream_names(&got)
                .into_iter()
                .filter(|n| n.contains('_'))
                .collect();
            let want: &[&str] = if keeps { &["x_custom"] } else { &[] };
            assert_eq!(underscored, want, "{case}: {}", got.body);

            // An open route: nothing of the identity's is set, the forwarding fields are.
            let got = send(gw.addr(listener), h2, "/headers", &forged).await;
            assert_eq!(got.status, 200, "{case}: {}", got.body);
            let mut underscored: Vec<_> = upstream_names(&got)
                .into_iter()
                .filter(|n| n.contains('_'))
                .collect();
            underscored.sort();
            let want: &[&str] = if keeps {
                &["x_auth-subject", "x_auth_subject", "x_custom", "x_user"]
            } else {
                &[]
            };
            assert_eq!(underscored, want, "{case} open: {}", got.body);
        }
    }
}

/// `X-Forwarded-Client-Cert` and a certificate's subject, on a TLS listener that keeps
/// underscores: neither can be named away by `Connection` or shadowed by an underscore
/// spelling.
#[tokio::test]
async fn the_client_certificate_headers_cannot_be_stripped_or_shadowed() {
    use boring::pkey::PKey;
    use boring::x509::X509;
    let origin = Origin::start("o").await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    issue(&d, "ca", "Test Client CA", None, &[]);
    let ca = X509::from_pem(&std::fs::read(d.join("ca.crt")).unwrap()).unwrap();
    let ca_key = PKey::private_key_from_pem(&std::fs::read(d.join("ca.key")).unwrap()).unwrap();
    issue(
        &d,
        "alice",
        "alice",
        Some((&ca, &ca_key)),
        &["alice.clients.test"],
    );
    write_cert(&d, "site", KeyKind::EcdsaP256, &["api.test"]);
    let gw = TestGateway::start(
        &format!(
            r#"
[[certificate]]
name = "site"
cert = "site.crt"
key = "site.key"
[[listener]]
name = "tls"
address = "127.0.0.1:0"
underscores_in_headers = true
[listener.tls]
client_auth = "optional"
client_ca = "ca.crt"
forward_client_cert = true
[[upstream]]
name = "o"
servers = [{{ address = "{}" }}]
[[route]]
name = "certs"
upstream = "o"
[route.auth]
cert = {{ sans = ["DNS:alice.clients.test"] }}
"#,
            origin.addr
        ),
        dir,
    )
    .await;
    let opts = ClientOpts {
        sni: Some("api.test"),
        alpn: vec![b"http/1.1"],
        client_cert: Some((d.join("alice.crt"), d.join("alice.key"))),
        ..ClientOpts::default()
    };
    let hs = tls_connect(gw.addr("tls"), &opts).await.unwrap();
    let req = http::Request::get("/headers")
        .header("host", "api.test")
        .header("connection", "X-Forwarded-Client-Cert, X-Auth-Subject")
        .header("x-forwarded-client-cert", "Hash=forged")
        .header("X_Forwarded_Client_Cert", "Hash=forged")
        .header("X_Auth_Subject", "CN=root")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let got = http1_send(hs.stream, req).await;
    assert_eq!(got.status, 200, "{}", got.body);
    let xfcc = upstream_header(&got, "x-forwarded-client-cert").expect("XFCC went upstream");
    assert!(
        xfcc.starts_with("Hash=") && !xfcc.contains("forged") && xfcc.contains("CN=alice"),
        "{xfcc}"
    );
    assert_eq!(
        upstream_header(&got, "x-auth-subject").as_deref(),
        Some("CN=alice")
    );
    let underscored: Vec<_> = upstream_names(&got)
        .into_iter()
        .filter(|n| n.contains('_'))
        .collect();
    assert!(underscored.is_empty(), "{underscored:?}");
}

/// Trailer fields of a request never reach the origin: they come after every decision, so a
/// client could put a second `Authorization`, its own `X-Auth-Subject` or `X-Forwarded-For`
/// there for an origin that merges trailers into the head. Dropped as NGINX drops them, over
/// HTTP/1.1 (chunked) and HTTP/2 (a trailing HEADERS frame); the body still arrives whole.
#[tokio::test]
async fn request_trailers_never_reach_the_origin() {
    let origin = Origin::start("o").await;
    let asked = Arc::new(AtomicUsize::new(0));
    let gw = gateway(origin.addr, auth_service(asked).await).await;
    let addr = gw.addr("web");
    let raw = "POST /api/trailers HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer good\r\n\
               Transfer-Encoding: chunked\r\nTE: trailers\r\nConnection: close\r\n\r\n\
               3\r\nabc\r\n0\r\nX-Auth-Subject: mallory\r\nAuthorization: Bearer evil\r\n\
               X-Forwarded-For: 6.6.6.6\r\n\r\n";
    let got = raw_exchange(addr, raw.as_bytes(), std::time::Duration::from_secs(10)).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.ends_with("none 3"), "the origin got trailers: {got}");

    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-auth-subject", "mallory".parse().unwrap());
    trailers.insert("authorization", "Bearer evil".parse().unwrap());
    let frames = vec![
        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from_static(b"abc"))),
        Ok(hyper::body::Frame::trailers(trailers)),
    ];
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
    let req = http::Request::post("http://api.test/api/trailers")
        .header("authorization", "Bearer good")
        .body(body)
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let got = collect(sender.send_request(req).await.unwrap()).await;
    assert_eq!((got.status, got.body.as_str()), (200, "none 3"));
}
