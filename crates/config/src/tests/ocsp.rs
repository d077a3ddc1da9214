//! `ocsp = "auto" | "off"` on a `[[certificate]]`.

use super::*;

#[test]
fn ocsp_is_auto_by_default_can_be_turned_off_and_a_typo_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "a", "a.test");
    let base = "[[listener]]\nname = \"l\"\naddress = \"127.0.0.1:1\"\n[listener.tls]\n[[certificate]]\nname = \"a\"\ncert = \"a.crt\"\nkey = \"a.key\"\n";
    assert!(load_str(base, "t", dir.path()).unwrap().certificates[0].ocsp);
    let off = format!("{base}ocsp = \"off\"\n");
    let s = load_str(&off, "t", dir.path()).unwrap();
    assert!(!s.certificates[0].ocsp);
    // A changed setting is a different certificate (a reload rebuilds what staples).
    let auto = load_str(base, "t", dir.path()).unwrap();
    assert_ne!(
        s.certificates[0].fingerprint,
        auto.certificates[0].fingerprint
    );
    let typo = format!("{base}ocsp = \"on\"\n");
    let errs = errors(&typo, dir.path());
    assert!(
        said_at(&errs, &typo, "ocsp = ").contains("unknown ocsp"),
        "{errs:#?}"
    );
}
