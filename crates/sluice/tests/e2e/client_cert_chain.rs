//! Client certificate chains (root → intermediate → client, the client sending its
//! certificate and its intermediate) made with `openssl ca`, each sent to Sluice and to
//! Debian's NGINX (`ssl_verify_client on; ssl_crl ...`) on the same files: Sluice accepts or
//! refuses each as NGINX does. The CRLs are checked for every certificate of the chain (a
//! revoked intermediate revokes its clients); a chain whose intermediate has no CRL is
//! refused, as NGINX does, unless `client_crl_missing = "allow"`, which forgives that and
//! nothing else. The same decisions where the mode comes from a `[[certificate]]`'s own
//! `client_auth` (per SNI name). A refused chain's subject is never trusted by a route's
//! `cert` method.

use crate::differential::{Child, nginx_with, wait_listening};
use crate::support::*;
use bytes::Bytes;
use http_body_util::Full;
use sluice_tls::selfsigned::KeyKind;
use std::net::SocketAddr;
use std::path::Path;

/// `openssl ca`'s configuration: one database per CA (`CADIR`), and the extensions of each
/// kind of certificate.
const CA_CNF: &str = "[ca]
default_ca = c
[c]
dir = $ENV::CADIR
database = $dir/index.txt
new_certs_dir = $dir
serial = $dir/serial
crlnumber = $dir/crlnumber
default_md = sha256
policy = p
copy_extensions = copy
default_crl_days = 30
unique_subject = no
crl_extensions = crl_ext
[p]
commonName = supplied
organizationName = optional
[crl_ext]
authorityKeyIdentifier = keyid:always
[root]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[root_pathlen0]
basicConstraints = critical,CA:TRUE,pathlen:0
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[int]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[int_nc]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
nameConstraints = critical,permitted;DNS:inside.test,permitted;email:inside.test
[leaf]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[leaf_server]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[leaf_critical]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
1.3.6.1.4.1.55555.1 = critical,ASN1:UTF8String:unknown
";

/// The PKI: roots `root` and `root-pl0` (pathlen:0) in `roots.crt`; intermediates under
/// them; a client (`NAME.crt`: its certificate then its issuer's, `NAME.key`) per case;
/// `crls.pem`, every CA's CRL but `int-nocrl`'s (`root`'s revokes `int-revoked`,
/// `int-good`'s revokes `leaf-revoked`).
const PKI_SH: &str = r#"
set -e
ec="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
newca() { mkdir -p "$1.db" && : > "$1.db/index.txt" && echo 01 > "$1.db/serial" && echo 01 > "$1.db/crlnumber"; }
ca() { local by=$1; shift; CADIR=$by.db openssl ca -batch -notext -config ca.cnf -cert $by.crt -keyfile $by.key "$@" 2>/dev/null; }
# sign ISSUER CSR OUT EXTENSIONS [openssl ca options]
sign() { local by=$1 csr=$2 out=$3 ext=$4; shift 4; ca $by -extensions $ext -in $csr -out $out "$@"; }
# client ISSUER NAME EXTENSIONS [subjectAltName]
client() {
  local by=$1 who=$2 ext=$3 san=${4:-DNS:$2.clients.test}
  openssl req $ec -keyout $who.key -out $who.csr -subj "/O=Example/CN=$who" -addext "subjectAltName=$san" 2>/dev/null
  sign $by $who.csr $who.only.crt $ext -days 30
  cat $who.only.crt $by.crt > $who.crt
}
for r in root:root root-pl0:root_pathlen0; do
  name=${r%%:*}
  CADIR=. openssl req -x509 $ec -keyout $name.key -out $name.crt -days 3650 -subj "/O=Example/CN=$name" \
    -config ca.cnf -extensions ${r##*:} 2>/dev/null
  newca $name
done
cat root.crt root-pl0.crt > roots.crt
for i in int-good int-revoked int-expired int-future int-nc int-nocrl int-pl; do
  openssl req $ec -keyout $i.key -out $i.csr -subj "/O=Example/CN=$i" 2>/dev/null
  newca $i
done
sign root int-good.csr int-good.crt int -days 365
sign root int-revoked.csr int-revoked.crt int -days 365
sign root int-expired.csr int-expired.crt int -startdate 20200101000000Z -enddate 20210101000000Z
sign root int-future.csr int-future.crt int -startdate 20990101000000Z -enddate 20991231000000Z
sign root int-nc.csr int-nc.crt int_nc -days 365
sign root int-nocrl.csr int-nocrl.crt int -days 365
sign root-pl0 int-pl.csr int-pl.crt int -days 365
ca root -revoke int-revoked.crt
client int-good good leaf
client int-good leaf-revoked leaf
ca int-good -revoke leaf-revoked.only.crt
client int-revoked under-revoked-int leaf
client int-expired under-expired-int leaf
client int-future under-future-int leaf
client root-pl0 pathlen-ok leaf
client int-pl pathlen-exceeded leaf
client int-nc names-inside leaf "DNS:device.inside.test,email:device@inside.test"
client int-nc names-outside leaf "DNS:device.outside.test"
client int-good server-eku leaf_server
client int-good unknown-critical leaf_critical
client int-nocrl under-crl-less-int leaf
client int-nocrl server-eku-crl-less leaf_server
for c in root root-pl0 int-good int-revoked int-expired int-future int-nc int-pl; do ca $c -gencrl -out $c.crl; done
cat root.crl root-pl0.crl int-good.crl int-revoked.crl int-expired.crl int-future.crl int-nc.crl int-pl.crl > crls.pem
"#;

/// Each case: its client, whether NGINX (and so Sluice) accepts it, and whether Sluice
/// with `client_crl_missing = "allow"` does.
const CASES: &[(&str, bool, bool)] = &[
    ("good", true, true),
    ("under-revoked-int", false, false),
    ("leaf-revoked", false, false),
    ("under-expired-int", false, false),
    ("under-future-int", false, false),
    // root-pl0 (pathlen:0) issuing a client directly: within its constraint.
    ("pathlen-ok", true, true),
    // root-pl0 → int-pl → client: an intermediate more than pathlen:0 allows.
    ("pathlen-exceeded", false, false),
    ("names-inside", true, true),
    ("names-outside", false, false),
    // serverAuth only: both check the client's purpose (OpenSSL's and BoringSSL's
    // `ssl_client`, which a server sets for its peer), so both refuse.
    ("server-eku", false, false),
    ("unknown-critical", false, false),
    // int-nocrl's CRL is not in crls.pem: "unable to get certificate CRL".
    ("under-crl-less-int", false, true),
    // A failure found before the missing CRL (the purpose is checked first): "allow"
    // forgives the missing CRL, not the failure before it.
    ("server-eku-crl-less", false, false),
];

fn make_pki(d: &Path) {
    std::fs::write(d.join("ca.cnf"), CA_CNF).unwrap();
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(PKI_SH)
        .current_dir(d)
        .output()
        .expect("bash and openssl run");
    assert!(
        out.status.success(),
        "making the PKI failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn start_nginx(d: &Path, port: u16, origin: SocketAddr) -> Child {
    let dir = d.display();
    // info: the log names why each certificate failed ("client SSL certificate verify
    // error: (23:certificate revoked)"). ssl_verify_depth: NGINX's default of 1 refuses a
    // chain with an intermediate before any of the checks under test.
    let servers = format!(
        r#"
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {dir}/server.crt;
        ssl_certificate_key {dir}/server.key;
        ssl_client_certificate {dir}/roots.crt;
        ssl_crl {dir}/crls.pem;
        ssl_verify_client on;
        ssl_verify_depth 4;
        location / {{ proxy_pass http://{origin}; }}
    }}"#
    );
    nginx_with(d, &servers, false, "info")
}

/// The status of a GET of `path` over TLS presenting `who`'s chain; 0 when the handshake
/// failed.
async fn status(addr: SocketAddr, d: &Path, who: &str, path: &str) -> u16 {
    status_at(addr, "api.test", d, who, path).await
}

/// [`status`] for the site `name` (SNI and Host).
async fn status_at(addr: SocketAddr, name: &'static str, d: &Path, who: &str, path: &str) -> u16 {
    let opts = ClientOpts {
        sni: Some(name),
        alpn: vec![b"http/1.1"],
        client_cert: Some((d.join(format!("{who}.crt")), d.join(format!("{who}.key")))),
        ..ClientOpts::default()
    };
    let Ok(hs) = tls_connect(addr, &opts).await else {
        return 0;
    };
    let req = http::Request::get(path)
        .header("host", name)
        .body(Full::new(Bytes::new()))
        .unwrap();
    http1_send(hs.stream, req).await.status
}

/// What NGINX's error log gained since it was `seen` bytes long: the reason a certificate
/// failed, as `(23:certificate revoked)`, or "-".
fn nginx_reason(d: &Path, seen: &mut usize) -> String {
    let log = std::fs::read_to_string(d.join("nginx-error.log")).unwrap_or_default();
    let new = log.get(*seen..).unwrap_or_default();
    *seen = log.len();
    new.lines()
        .rev()
        .find_map(|l| l.split("certificate verify error: ").nth(1))
        .map(|r| r.split(" while ").next().unwrap_or(r).to_owned())
        .unwrap_or_else(|| "-".to_owned())
}

/// `who`'s subject as `openssl x509 -nameopt RFC2253` writes it (what `subjects` matches).
fn subject(d: &Path, who: &str) -> String {
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in"])
        .arg(d.join(format!("{who}.only.crt")))
        .output()
        .unwrap();
    let s = String::from_utf8(out.stdout).unwrap();
    s.trim().trim_start_matches("subject=").to_owned()
}

#[tokio::test]
async fn client_cert_chains_are_checked_whole_as_nginx_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    make_pki(&d);
    write_cert(&d, "server", KeyKind::EcdsaP256, &["api.test"]);
    write_cert(&d, "by-name", KeyKind::EcdsaP256, &["by-name.test"]);
    let origin = Origin::start("api").await;
    let nginx_port = free_port();
    let _nginx = start_nginx(&d, nginx_port, origin.addr);
    let nginx: SocketAddr = ([127, 0, 0, 1], nginx_port).into();
    // A route that trusts, by subject, a client under a revoked intermediate and one under
    // the CRL-less intermediate: the listener refuses the first everywhere, and the second
    // where a missing CRL is refused, before any route sees them.
    let trusted = [
        subject(&d, "under-revoked-int"),
        subject(&d, "under-crl-less-int"),
    ];
    let tls = r#"client_auth = "required"
client_ca = "roots.crt"
client_crl = "crls.pem""#;
    // The by-name listener asks no one but the clients of by-name.test, whose certificate
    // requires one: the same checks through the per-connection mode.
    let off = tls.replace("\"required\"", "\"off\"");
    let gw = TestGateway::start(
        &format!(
            r#"
[[certificate]]
name = "server"
cert = "server.crt"
key = "server.key"
[[certificate]]
name = "by-name"
cert = "by-name.crt"
key = "by-name.key"
client_auth = "required"
[[listener]]
name = "strict"
address = "127.0.0.1:0"
[listener.tls]
certificates = ["server"]
{tls}
[[listener]]
name = "lenient"
address = "127.0.0.1:0"
[listener.tls]
certificates = ["server"]
{tls}
client_crl_missing = "allow"
[[listener]]
name = "by-name"
address = "127.0.0.1:0"
[listener.tls]
certificates = ["by-name"]
{off}
[[upstream]]
name = "api"
servers = [{{ address = "{origin}" }}]
[[route]]
name = "any-client"
path_prefix = "/"
upstream = "api"
[[route]]
name = "by-subject"
path_prefix = "/by-subject/"
strip_prefix = "/by-subject"
upstream = "api"
[route.auth]
cert = {{ subjects = ["{}", "{}"] }}
"#,
            trusted[0],
            trusted[1],
            origin = origin.addr
        ),
        dir,
    )
    .await;
    wait_listening(nginx).await;
    let (strict, lenient, by_name) = (gw.addr("strict"), gw.addr("lenient"), gw.addr("by-name"));

    let word = |s: u16| match s {
        200 => "accepted",
        400 => "refused",
        _ => "other",
    };
    let mut table = format!(
        "{:20} {:9} {:9} {:15} {:15} nginx's reason\n",
        "case", "nginx", "sluice", "sluice (allow)", "sluice by name"
    );
    let mut wrong = Vec::new();
    let mut seen = 0;
    for &(case, accepted, allowed) in CASES {
        let n = status(nginx, &d, case, "/whoami").await;
        let reason = nginx_reason(&d, &mut seen);
        let s = status(strict, &d, case, "/whoami").await;
        let l = status(lenient, &d, case, "/whoami").await;
        let b = status_at(by_name, "by-name.test", &d, case, "/whoami").await;
        table.push_str(&format!(
            "{case:20} {:9} {:9} {:15} {:15} {reason}\n",
            word(n),
            word(s),
            word(l),
            word(b)
        ));
        let want = |ok: bool| if ok { 200 } else { 400 };
        if n != want(accepted) || s != n || b != n || l != want(allowed) {
            wrong.push(case);
        }
    }
    eprintln!("{table}");
    assert!(wrong.is_empty(), "wrong for {wrong:?}:\n{table}");

    // The route trusting refused chains by subject: still refused (400, not the route's
    // 200); a chain the lenient listener verifies reaches it, so the subjects do match; a
    // verified client the route does not name gets its 403.
    let at = "/by-subject/whoami";
    assert_eq!(status(strict, &d, "under-revoked-int", at).await, 400);
    assert_eq!(status(lenient, &d, "under-revoked-int", at).await, 400);
    assert_eq!(status(strict, &d, "under-crl-less-int", at).await, 400);
    assert_eq!(status(lenient, &d, "under-crl-less-int", at).await, 200);
    assert_eq!(status(strict, &d, "good", at).await, 403);
}
