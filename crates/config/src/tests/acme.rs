//! `[acme]` and `[[certificate]] acme = { ... }`: the order resolved from its defaults, the
//! placeholder served until the CA issues, what storage holds taken instead, and the
//! mistakes an operator makes named at their line.

use super::*;
use crate::{AcmeChallenge, AcmeKeyType, load_str_cached};
use std::sync::Arc;

const ACME: &str = r#"
[acme]
storage = "store"
directory = "https://ca.test/dir"
email = "ops@example.com"
retry_min = "2s"
retry_max = "1m"
[[listener]]
name = "http"
address = "127.0.0.1:1"
[[listener]]
name = "https"
address = "127.0.0.1:2"
[listener.tls]
[[certificate]]
name = "site"
acme = { names = ["Example.com", "www.example.com"], renew_before = "10d" }
"#;

#[test]
fn an_acme_certificate_loads_as_a_placeholder_with_its_order_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let s = load_str(ACME, "t", dir.path()).unwrap();
    let c = &s.certificates[0];
    assert!(c.placeholder);
    let o = c.acme.as_ref().unwrap();
    assert_eq!(o.names, ["example.com", "www.example.com"]);
    assert_eq!(o.directory, "https://ca.test/dir");
    assert_eq!(o.email.as_deref(), Some("ops@example.com"));
    assert_eq!(o.challenge, AcmeChallenge::Http01);
    assert_eq!(o.key_type, AcmeKeyType::EcdsaP256);
    assert_eq!(o.renew_before, Duration::from_secs(10 * 86_400));
    assert_eq!(o.dir, dir.path().join("store/site"));
    assert_eq!(s.acme.retry_min, Duration::from_secs(2));
    assert_eq!(s.acme.retry_max, Duration::from_secs(60));
    // The placeholder is self-signed for the names, which the certificate serves.
    let leaf = &c.chain[0];
    assert!(
        leaf.public_key()
            .unwrap()
            .public_eq(c.key.as_ref().unwrap())
    );
    let sans: Vec<String> = leaf
        .subject_alt_names()
        .unwrap()
        .iter()
        .filter_map(|n| n.dnsname().map(str::to_owned))
        .collect();
    assert_eq!(sans, ["example.com", "www.example.com"]);
    assert_eq!(c.hosts.len(), 2);
    // Defaults: Let's Encrypt, http-01, 30 days, storage beside the file.
    let bare = "[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:1\"\n[[certificate]]\nname = \"x\"\nacme = { names = [\"a.example\"] }\n";
    let s = load_str(bare, "t", dir.path()).unwrap();
    let o = s.certificates[0].acme.as_ref().unwrap();
    assert_eq!(o.directory, crate::LETS_ENCRYPT);
    assert_eq!(o.renew_before, Duration::from_secs(30 * 86_400));
    assert_eq!(o.dir, dir.path().join("acme/x"));
}

#[test]
fn a_reload_keeps_the_placeholder_and_takes_what_storage_holds_once_issued() {
    let dir = tempfile::tempdir().unwrap();
    let cache = crate::CertCache::new();
    let first = load_str_cached(ACME, "t", dir.path(), &cache).unwrap();
    let again = load_str_cached(ACME, "t", dir.path(), &cache).unwrap();
    assert!(
        Arc::ptr_eq(&first.certificates[0], &again.certificates[0]),
        "the same placeholder, not a new key per reload"
    );
    // What an order stored: a certificate for both names and its key.
    let store = dir.path().join("store/site");
    std::fs::create_dir_all(&store).unwrap();
    let (cert, key) = crate::selfsigned::generate(
        crate::selfsigned::KeyKind::EcdsaP256,
        &["example.com", "www.example.com"],
        90,
        "Test CA",
    )
    .unwrap();
    std::fs::write(store.join("cert.pem"), cert.to_pem().unwrap()).unwrap();
    std::fs::write(
        store.join("key.pem"),
        key.private_key_to_pem_pkcs8().unwrap(),
    )
    .unwrap();
    set_mode(&store.join("key.pem"), 0o600);
    let issued = load_str_cached(ACME, "t", dir.path(), &cache).unwrap();
    let c = &issued.certificates[0];
    assert!(!c.placeholder);
    assert_eq!(c.chain[0].to_der().unwrap(), cert.to_der().unwrap());
    assert_ne!(c.fingerprint, first.certificates[0].fingerprint);
    assert_ne!(issued.revision, first.revision);
    // A certificate stored for other names (the list changed) is not served for these.
    let more = ACME.replace(
        "\"www.example.com\"]",
        "\"www.example.com\", \"api.example.com\"]",
    );
    assert!(load_str(&more, "t", dir.path()).unwrap().certificates[0].placeholder);
}

#[test]
fn acme_mistakes_are_named_at_their_line() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "a.test");
    let both = ACME.replace(
        "[[certificate]]\nname = \"site\"\n",
        "[[certificate]]\nname = \"site\"\ncert = \"a.crt\"\n",
    );
    let errs = errors(&both, dir.path());
    assert!(
        said_at(&errs, &both, "cert = \"a.crt\"").contains("both `acme`"),
        "{errs:#?}"
    );

    for (names, why) in [
        ("[\"*.example.com\"]", "a wildcard"),
        ("[\"10.0.0.1\"]", "an IP address"),
        ("[\"intranet\"]", "not a fully qualified"),
        ("[]", "names is empty"),
    ] {
        let src = ACME.replace("[\"Example.com\", \"www.example.com\"]", names);
        let errs = errors(&src, dir.path());
        assert!(
            said_at(&errs, &src, "acme = {").contains(why),
            "{names}: {errs:#?}"
        );
    }
    for (setting, why) in [
        ("challenge = \"dns-02\"", "unknown challenge"),
        ("challenge = \"dns-01\"", "needs dns = {"),
        (
            "challenge = \"dns-01\", dns = { server = \"ns.test\", key_name = \"k\" }",
            "exactly one of secret and secret_file",
        ),
        (
            "challenge = \"dns-01\", dns = { server = \"ns.test\", key_name = \"k\", secret = \"%%\" }",
            "dns.secret is not base64",
        ),
        (
            "challenge = \"dns-01\", dns = { server = \"ns.test\", secret = \"a2V5\" }",
            "dns.key_name is missing",
        ),
        (
            "challenge = \"dns-01\", dns = { server = \"ns.test\", key_name = \"k\", secret = \"a2V5\", algorithm = \"hmac-md5\" }",
            "unknown dns.algorithm",
        ),
        (
            "eab = { kid = \"k\" }",
            "exactly one of hmac_key and hmac_key_file",
        ),
        ("key_type = \"dsa\"", "unknown key_type"),
        ("directory = \"http://ca.test/dir\"", "not an https:// URL"),
        ("ca = \"missing.pem\"", "cannot read"),
    ] {
        let src = ACME.replace("renew_before = \"10d\"", setting);
        let errs = errors(&src, dir.path());
        assert!(
            said_at(&errs, &src, "acme = {").contains(why),
            "{setting}: {errs:#?}"
        );
    }
    let src = ACME.replace("name = \"site\"", "name = \"../site\"");
    let errs = errors(&src, dir.path());
    assert!(
        said_at(&errs, &src, "../site").contains("directory in storage"),
        "{errs:#?}"
    );
    let src = ACME.replace("retry_max = \"1m\"", "retry_max = \"1s\"");
    let errs = errors(&src, dir.path());
    assert!(
        said_at(&errs, &src, "retry_max").contains("shorter"),
        "{errs:#?}"
    );
}

#[test]
fn a_challenge_without_a_listener_to_answer_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // http-01 needs a plain-HTTP listener.
    let no_http = ACME.replace(
        "[[listener]]\nname = \"http\"\naddress = \"127.0.0.1:1\"\n",
        "",
    );
    let errs = errors(&no_http, dir.path());
    assert!(
        said_at(&errs, &no_http, "acme = {").contains("no listener can answer"),
        "{errs:#?}"
    );
    // tls-alpn-01 needs a TLS listener serving the certificate.
    let alpn = ACME.replace("renew_before = \"10d\"", "challenge = \"tls-alpn-01\"");
    assert!(load_str(&alpn, "t", dir.path()).is_ok());
    let no_tls = alpn.replace(
        "[[listener]]\nname = \"https\"\naddress = \"127.0.0.1:2\"\n[listener.tls]\n",
        "",
    );
    let errs = errors(&no_tls, dir.path());
    assert!(
        said_at(&errs, &no_tls, "acme = {").contains("tls-alpn-01 challenge"),
        "{errs:#?}"
    );
}

#[test]
fn a_wildcard_dns_01_order_takes_its_key_from_a_tsig_keygen_file_and_its_eab() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("update.key"),
        "key \"acme-update.\" {\n\talgorithm hmac-sha512;\n\tsecret \"c2VjcmV0LXNlY3JldA==\";\n};\n",
    )
    .unwrap();
    let src = ACME.replace(
        "acme = { names = [\"Example.com\", \"www.example.com\"], renew_before = \"10d\" }",
        "acme = { names = [\"*.example.com\", \"example.com\"], challenge = \"dns-01\", \
         dns = { server = \"127.0.0.1:5353\", secret_file = \"update.key\", zone = \"Example.com.\", propagation_delay = \"2s\" }, \
         eab = { kid = \"kid-1\", hmac_key = \"-_8\" } }",
    );
    let s = load_str(&src, "t", dir.path()).unwrap();
    let c = &s.certificates[0];
    let o = c.acme.as_ref().unwrap();
    assert_eq!(o.names, ["*.example.com", "example.com"]);
    assert_eq!(o.challenge, AcmeChallenge::Dns01);
    let dns = o.dns.as_ref().unwrap();
    assert_eq!(dns.server, "127.0.0.1:5353");
    assert_eq!(dns.zone.as_deref(), Some("example.com"));
    assert_eq!(dns.key_name, "acme-update");
    assert_eq!(dns.algorithm, crate::TsigAlgorithm::HmacSha512);
    assert_eq!(dns.secret.0, b"secret-secret");
    assert_eq!(dns.propagation_delay, Duration::from_secs(2));
    let eab = o.eab.as_ref().unwrap();
    assert_eq!(
        (eab.kid.as_str(), eab.hmac_key.0.as_slice()),
        ("kid-1", &[0xfb, 0xff][..])
    );
    // The secrets never show in a printed order.
    let printed = format!("{o:?}");
    assert!(
        !printed.contains("c2VjcmV0") && !printed.contains("secret-secret"),
        "{printed}"
    );
    // The placeholder covers the wildcard, and the wildcard host is served.
    assert!(c.placeholder);
    assert!(
        c.hosts
            .iter()
            .any(|h| matches!(h, crate::HostPattern::Wildcard(_)))
    );
}
