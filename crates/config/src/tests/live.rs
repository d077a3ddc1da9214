//! What live reconfiguration relies on: every error in one pass, certificates parsed once,
//! revisions that tell configurations apart.

use super::{write_cert, write_secret};
use crate::{CertCache, load_str, load_str_cached};
use std::sync::Arc;

const TLS: &str = r#"[[listener]]
name = "https"
address = "127.0.0.1:0"
[listener.tls]
certificates = ["a"]

[[certificate]]
name = "a"
cert = "a.crt"
key = "a.key"
"#;

#[test]
fn every_unknown_key_of_a_table_is_named_and_a_listener_with_one_still_counts() {
    let text = "[[listener]]\nname = \"http\"\nbind = \"127.0.0.1:80\"\naddres = \"x\"\naddress = \"127.0.0.1:0\"\n[listener.tls]\ncertificate = [\"a\"]\n";
    let errs = load_str(text, "t.toml", std::path::Path::new("."))
        .unwrap_err()
        .errors()
        .to_vec();
    let at: Vec<(usize, &str)> = errs.iter().map(|e| (e.line, e.message.as_str())).collect();
    assert!(
        at.iter().any(|(l, m)| *l == 3 && m.contains("`bind`"))
            && at.iter().any(|(l, m)| *l == 4 && m.contains("`addres`"))
            && at
                .iter()
                .any(|(l, m)| *l == 7 && m.contains("`certificate`")),
        "{errs:#?}"
    );
    assert!(
        !errs
            .iter()
            .any(|e| e.message.contains("has no [[listener]]")),
        "a listener that exists is not reported missing: {errs:#?}"
    );
}

#[test]
fn an_unchanged_certificate_is_not_parsed_again_and_a_renewed_one_is() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "a.test");
    let cache = CertCache::new();
    let first = load_str_cached(TLS, "t.toml", dir.path(), &cache).unwrap();
    let again = load_str_cached(TLS, "t.toml", dir.path(), &cache).unwrap();
    assert!(Arc::ptr_eq(&first.certificates[0], &again.certificates[0]));
    assert_eq!(first.revision, again.revision);

    write_cert(dir.path(), "a", "a.test");
    let renewed = load_str_cached(TLS, "t.toml", dir.path(), &cache).unwrap();
    assert!(!Arc::ptr_eq(
        &first.certificates[0],
        &renewed.certificates[0]
    ));
    assert_ne!(
        first.revision, renewed.revision,
        "new key files, new revision"
    );
    assert_eq!(cache.len(), 1, "the cache holds what the last load used");
}

#[test]
fn a_failed_load_keeps_the_cache_of_the_last_good_one() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "a.test");
    let cache = CertCache::new();
    let good = load_str_cached(TLS, "t.toml", dir.path(), &cache).unwrap();
    std::fs::write(dir.path().join("a.key"), "not a key").unwrap();
    let errs = load_str_cached(TLS, "t.toml", dir.path(), &cache).unwrap_err();
    assert!(
        errs.errors()
            .iter()
            .any(|e| e.line == 10 && e.message.contains("no PEM private key")),
        "{errs}"
    );
    assert_eq!(cache.len(), 1);
    let _ = good;
}

#[test]
fn the_admin_token_file_must_be_private_and_long_enough() {
    let dir = tempfile::tempdir().unwrap();
    let base = "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:0\"\n[admin]\ntoken_file = \"admin.token\"\n";
    let token = dir.path().join("admin.token");
    write_secret(&token, "short\n");
    let errs = load_str(base, "t", dir.path()).unwrap_err();
    assert!(errs.to_string().contains("at least 16"), "{errs}");

    write_secret(&token, "0123456789abcdef0123\n");
    let s = load_str(base, "t", dir.path()).unwrap();
    assert_eq!(
        s.admin.unwrap().token.as_deref(),
        Some("0123456789abcdef0123")
    );

    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let errs = load_str(base, "t", dir.path()).unwrap_err();
    assert!(errs.to_string().contains("chmod 600"), "{errs}");
}
