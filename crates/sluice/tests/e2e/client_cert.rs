//! Client certificates on a TLS listener (`[listener.tls] client_auth`), made with
//! `openssl` (a CA with `openssl ca`: valid, expired, revoked by its CRL; another CA's), side
//! by side with Debian's NGINX `ssl_verify_client on` on the same files: the same statuses.
//! Then what a verified certificate carries: the route's `cert` method, the subject
//! upstream, `X-Forwarded-Client-Cert` (a client's forged one removed), and a resumed
//! session keeping its identity.

use crate::differential::{Child, nginx_with, wait_listening};
use crate::support::*;
use bytes::Bytes;
use http_body_util::Full;
use sluice_tls::selfsigned::KeyKind;
use std::net::SocketAddr;
use std::path::Path;

/// `openssl ca`'s configuration for the test CA.
const CA_CNF: &str = "[ca]
default_ca = c
[c]
database = db/index.txt
new_certs_dir = db
serial = db/serial
crlnumber = db/crlnumber
default_md = sha256
policy = p
copy_extensions = copy
default_crl_days = 30
unique_subject = no
[p]
commonName = supplied
organizationName = optional
";

/// The certificates: `ca` (issuing alice, bob, expired and revoked, with `ca.crl` revoking
/// the last), `other` (issuing mallory).
fn make_pki(d: &Path) {
    std::fs::write(d.join("ca.cnf"), CA_CNF).unwrap();
    let script = r#"
set -e
ec="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
openssl req -x509 $ec -keyout ca.key -out ca.crt -days 3650 -subj "/CN=Test Client CA" 2>/dev/null
openssl req -x509 $ec -keyout other.key -out other.crt -days 3650 -subj "/CN=Other CA" 2>/dev/null
mkdir -p db && : > db/index.txt && echo 01 > db/serial && echo 01 > db/crlnumber
for who in alice bob expired revoked; do
  openssl req $ec -keyout $who.key -out $who.csr -subj "/O=Example/CN=$who" \
    -addext "subjectAltName=URI:spiffe://test/$who,DNS:$who.clients.test" 2>/dev/null
done
sign() { openssl ca -batch -notext -config ca.cnf -cert ca.crt -keyfile ca.key "$@" 2>/dev/null; }
sign -in alice.csr -out alice.crt -days 30
sign -in bob.csr -out bob.crt -days 30
sign -in revoked.csr -out revoked.crt -days 30
sign -in expired.csr -out expired.crt -startdate 20200101000000Z -enddate 20200201000000Z
sign -revoke revoked.crt
sign -gencrl -out ca.crl
openssl req $ec -keyout mallory.key -out mallory.csr -subj "/O=Example/CN=mallory" 2>/dev/null
openssl x509 -req -in mallory.csr -CA other.crt -CAkey other.key -CAcreateserial -out mallory.crt -days 30 2>/dev/null
"#;
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(d)
        .output()
        .expect("bash and openssl run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn start_nginx(d: &Path, port: u16, origin: SocketAddr) -> Child {
    let dir = d.display();
    let servers = format!(
        r#"
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {dir}/server.crt;
        ssl_certificate_key {dir}/server.key;
        ssl_client_certificate {dir}/ca.crt;
        ssl_crl {dir}/ca.crl;
        ssl_verify_client on;
        location / {{ proxy_pass http://{origin}; }}
    }}"#
    );
    nginx_with(d, &servers, false, "warn")
}

/// What one request over TLS got.
struct Outcome {
    /// 0 when the handshake failed.
    status: u16,
    body: String,
    /// The session (ticket) the server issued.
    session: Option<boring::ssl::SslSession>,
    resumed: bool,
}

/// A GET over TLS presenting `who`'s certificate (none for `None`).
async fn get_as(
    addr: SocketAddr,
    d: &Path,
    who: Option<&str>,
    path: &str,
    headers: &[(&str, &str)],
    session: Option<boring::ssl::SslSession>,
) -> Outcome {
    let opts = ClientOpts {
        sni: Some("api.test"),
        alpn: vec![b"http/1.1"],
        client_cert: who.map(|w| (d.join(format!("{w}.crt")), d.join(format!("{w}.key")))),
        session,
        ..ClientOpts::default()
    };
    let Ok(hs) = tls_connect(addr, &opts).await else {
        return Outcome {
            status: 0,
            body: String::new(),
            session: None,
            resumed: false,
        };
    };
    let resumed = hs.stream.ssl().session_reused();
    let saved = hs.session.clone();
    let mut req = http::Request::get(path).header("host", "api.test");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let got = http1_send(hs.stream, req.body(Full::new(Bytes::new())).unwrap()).await;
    let session = saved.lock().unwrap().clone();
    Outcome {
        status: got.status,
        body: got.body,
        session,
        resumed,
    }
}

fn upstream_header(body: &str, name: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    v["headers"][name].as_str().map(str::to_owned)
}

#[tokio::test]
async fn client_certificates_answer_as_nginx_and_carry_their_identity_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    make_pki(&d);
    write_cert(&d, "server", KeyKind::EcdsaP256, &["api.test"]);
    let origin = Origin::start("api").await;
    let nginx_port = free_port();
    let _nginx = start_nginx(&d, nginx_port, origin.addr);
    let nginx: SocketAddr = ([127, 0, 0, 1], nginx_port).into();
    let gw = TestGateway::start(
        &format!(
            r#"
[[certificate]]
name = "server"
cert = "server.crt"
key = "server.key"
[[listener]]
name = "strict"
address = "127.0.0.1:0"
[listener.tls]
client_auth = "required"
client_ca = "ca.crt"
client_crl = "ca.crl"
forward_client_cert = true
[[upstream]]
name = "api"
servers = [{{ address = "{}" }}]
[[route]]
name = "any-client"
path_prefix = "/"
upstream = "api"
[[route]]
name = "alice-only"
path_prefix = "/alice/"
strip_prefix = "/alice"
upstream = "api"
[route.auth]
cert = {{ sans = ["URI:spiffe://test/alice"] }}
"#,
            origin.addr
        ),
        dir,
    )
    .await;
    wait_listening(nginx).await;
    let web = gw.addr("strict");

    let mut table = String::new();
    let mut differ = Vec::new();
    for who in [
        None,
        Some("alice"),
        Some("expired"),
        Some("revoked"),
        Some("mallory"),
    ] {
        let s = get_as(web, &d, who, "/whoami", &[], None).await.status;
        let n = get_as(nginx, &d, who, "/whoami", &[], None).await.status;
        let name = who.unwrap_or("none");
        table.push_str(&format!("{name:10} sluice {s} nginx {n}\n"));
        if s != n {
            differ.push(name);
        }
    }
    eprintln!("{table}");
    assert!(
        differ.is_empty(),
        "Sluice and NGINX differ for {differ:?}:\n{table}"
    );
    assert!(table.contains("alice      sluice 200"), "{table}");

    // A verified certificate: its subject upstream (as `openssl x509 -nameopt RFC2253`
    // writes it), and XFCC in Envoy's format; a client's forged XFCC never reaches the
    // upstream.
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in"])
        .arg(d.join("alice.crt"))
        .output()
        .unwrap();
    let subject = String::from_utf8(out.stdout).unwrap();
    let subject = subject.trim().trim_start_matches("subject=").to_owned();
    let forged = [("x-forwarded-client-cert", "Hash=forged;Subject=\"CN=root\"")];
    let first = get_as(web, &d, Some("alice"), "/alice/headers", &forged, None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        upstream_header(&first.body, "x-auth-subject").as_deref(),
        Some(subject.as_str())
    );
    let xfcc = upstream_header(&first.body, "x-forwarded-client-cert").unwrap();
    assert!(
        xfcc.starts_with("Hash=") && !xfcc.contains("forged"),
        "{xfcc}"
    );
    assert!(
        xfcc.contains(&format!(
            ";Subject=\"{subject}\";URI=spiffe://test/alice;DNS=alice.clients.test"
        )),
        "{xfcc}"
    );
    // bob's certificate verifies, but the route takes alice's only.
    let bob = get_as(web, &d, Some("bob"), "/alice/whoami", &[], None).await;
    assert_eq!(bob.status, 403);

    // A resumed session keeps the verified identity.
    let session = first.session.expect("the gateway issued a ticket");
    let again = get_as(web, &d, Some("alice"), "/alice/headers", &[], Some(session)).await;
    assert!(again.resumed, "the session resumed");
    assert_eq!(again.status, 200);
    assert_eq!(
        upstream_header(&again.body, "x-auth-subject").as_deref(),
        Some(subject.as_str())
    );
}

/// Two gateways sharing session ticket keys (a fleet): a session one made resumes on the
/// other only where both verify client certificates the same way; a gateway that trusts
/// other CAs makes a full handshake and verifies the certificate itself.
#[tokio::test]
async fn shared_ticket_keys_never_carry_a_verification_across_settings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    make_pki(&d);
    write_cert(&d, "server", KeyKind::EcdsaP256, &["api.test"]);
    let mut key = [0u8; 80];
    boring::rand::rand_bytes(&mut key).unwrap();
    std::fs::write(d.join("tickets.key"), key).unwrap();
    let origin = Origin::start("api").await;
    let config = |ca: &str| {
        format!(
            r#"
[[certificate]]
name = "server"
cert = "{d}/server.crt"
key = "{d}/server.key"
[[listener]]
name = "web"
address = "127.0.0.1:0"
[listener.tls]
ticket_key_file = "{d}/tickets.key"
client_auth = "required"
client_ca = "{d}/{ca}"
[[upstream]]
name = "api"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "all"
upstream = "api"
"#,
            d = d.display(),
            origin = origin.addr
        )
    };
    let a = TestGateway::start(&config("ca.crt"), tempfile::tempdir().unwrap()).await;
    let same = TestGateway::start(&config("ca.crt"), tempfile::tempdir().unwrap()).await;
    let other = TestGateway::start(&config("other.crt"), tempfile::tempdir().unwrap()).await;
    let first = get_as(a.addr("web"), &d, Some("alice"), "/whoami", &[], None).await;
    assert_eq!(first.status, 200);
    let session = first.session.expect("a ticket");
    // The same settings: the shared ticket resumes, and alice is still verified.
    let here = get_as(
        same.addr("web"),
        &d,
        Some("alice"),
        "/whoami",
        &[],
        Some(session.clone()),
    )
    .await;
    assert!(here.resumed, "a fleet peer with the same settings resumes");
    assert_eq!(here.status, 200);
    // Other CAs: no resumption; alice's certificate is checked against them and refused.
    let there = get_as(
        other.addr("web"),
        &d,
        Some("alice"),
        "/whoami",
        &[],
        Some(session),
    )
    .await;
    assert!(
        !there.resumed,
        "a gateway that verifies otherwise makes a full handshake"
    );
    assert_eq!(there.status, 400);
}
