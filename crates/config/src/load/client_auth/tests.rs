//! `client_crl_missing`: its default, its values, and the mistakes reported at load.

use crate::{ConfigError, LoadError, load_str};
use boring::asn1::Asn1Time;
use boring::ec::{EcGroup, EcKey};
use boring::hash::MessageDigest;
use boring::nid::Nid;
use boring::pkey::PKey;
use boring::x509::{X509, X509NameBuilder};
use std::path::Path;

/// A self-signed P-256 certificate and its key, as `stem.crt` and `stem.key` (mode 0600).
fn write_cert(dir: &Path, stem: &str) {
    let key = PKey::from_ec_key(
        EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap(),
    )
    .unwrap();
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_nid(Nid::COMMONNAME, stem).unwrap();
    let name = name.build();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(&name).unwrap();
    b.set_pubkey(&key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(30).unwrap())
        .unwrap();
    b.sign(&key, MessageDigest::sha256()).unwrap();
    std::fs::write(dir.join(format!("{stem}.crt")), b.build().to_pem().unwrap()).unwrap();
    let key_path = dir.join(format!("{stem}.key"));
    std::fs::write(&key_path, key.private_key_to_pem_pkcs8().unwrap()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A directory with a server certificate, a client CA and a CRL file (the loader checks a
/// CRL file's PEM label; the TLS crate parses it).
fn pki() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "site");
    write_cert(dir.path(), "ca");
    std::fs::write(
        dir.path().join("ca.crl"),
        "-----BEGIN X509 CRL-----\nAA==\n-----END X509 CRL-----\n",
    )
    .unwrap();
    dir
}

/// A listener whose `[listener.tls]` ends with `tls`.
fn config(tls: &str) -> String {
    format!(
        r#"
[[certificate]]
name = "site"
cert = "site.crt"
key = "site.key"
[[upstream]]
name = "api"
servers = [{{ address = "127.0.0.1:9000" }}]
[[route]]
name = "all"
upstream = "api"
[[listener]]
name = "web"
address = "127.0.0.1:8443"
[listener.tls]
client_auth = "required"
{tls}
"#
    )
}

/// Whether the listener of `tls` allows a missing CRL.
fn allowed(tls: &str, dir: &Path) -> bool {
    let s = load_str(&config(tls), "t.toml", dir).unwrap();
    let tls = s.listeners[0].tls.as_ref().unwrap();
    tls.client_auth.as_ref().unwrap().allow_missing_crl
}

/// The errors loading `src` gave, as "message | help" lines, on the line that holds `needle`.
fn said_at(src: &str, dir: &Path, needle: &str) -> String {
    let errs: Vec<ConfigError> = match load_str(src, "broken.toml", dir) {
        Err(LoadError::Invalid(e)) => e,
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a broken configuration loaded"),
    };
    let line = src.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let said: Vec<String> = errs
        .iter()
        .filter(|e| e.line == line)
        .map(|e| format!("{} | {}", e.message, e.help))
        .collect();
    assert!(!said.is_empty(), "no error at `{needle}`: {errs:#?}");
    said.join("\n")
}

#[test]
fn a_missing_crl_is_refused_unless_allowed() {
    let dir = pki();
    let d = dir.path();
    let crl = "client_ca = \"ca.crt\"\nclient_crl = \"ca.crl\"";
    assert!(!allowed(crl, d), "refused by default, as NGINX");
    assert!(!allowed(
        &format!("{crl}\nclient_crl_missing = \"refuse\""),
        d
    ));
    assert!(allowed(
        &format!("{crl}\nclient_crl_missing = \"allow\""),
        d
    ));
}

#[test]
fn a_wrong_client_crl_missing_names_the_key_and_the_fix() {
    let dir = pki();
    let d = dir.path();
    let typo =
        config("client_ca = \"ca.crt\"\nclient_crl = \"ca.crl\"\nclient_crl_missing = \"ignore\"");
    let said = said_at(&typo, d, "client_crl_missing");
    assert!(
        said.contains("`client_crl_missing` is \"ignore\"")
            && said.contains("\"refuse\", \"allow\""),
        "{said}"
    );

    // Nothing to be missing without client_crl.
    let no_crl = config("client_ca = \"ca.crt\"\nclient_crl_missing = \"allow\"");
    let said = said_at(&no_crl, d, "client_crl_missing");
    assert!(
        said.contains("client_crl_missing without client_crl") && said.contains("give client_crl"),
        "{said}"
    );
    let no_ca =
        config("client_crl_missing = \"allow\"").replace("client_auth = \"required\"\n", "");
    let said = said_at(&no_ca, d, "client_crl_missing");
    assert!(
        said.contains("client_crl_missing without client_ca"),
        "{said}"
    );
}
