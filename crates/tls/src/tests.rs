use crate::selfsigned::{KeyKind, generate, write_pair};
use crate::{CertStore, TicketKeys};
use sluice_config::load_str;
use std::path::Path;

fn write_cert(dir: &Path, stem: &str, kind: KeyKind, hosts: &[&str]) {
    let (cert, key) = generate(kind, hosts, 30).unwrap();
    write_pair(dir, stem, &cert, &key).unwrap();
}

fn config(dir: &Path, certs: &[&str], extra_tls: &str) -> String {
    let mut s = format!(
        "[[listener]]\nname = \"https\"\naddress = \"127.0.0.1:0\"\n[listener.tls]\n{extra_tls}\n[[upstream]]\nname = \"u\"\nservers = [{{ address = \"127.0.0.1:1\" }}]\n[[route]]\nname = \"r\"\nupstream = \"u\"\n"
    );
    for c in certs {
        s.push_str(&format!(
            "[[certificate]]\nname = \"{c}\"\ncert = '{d}/{c}.crt'\nkey = '{d}/{c}.key'\n",
            d = dir.display()
        ));
    }
    s
}

#[test]
fn store_groups_names_and_prefers_ecdsa_exact_before_wildcard() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(
        dir.path(),
        "a-rsa",
        KeyKind::Rsa2048,
        &["a.test", "*.a.test"],
    );
    write_cert(dir.path(), "a-ec", KeyKind::EcdsaP256, &["a.test"]);
    write_cert(dir.path(), "b-ec", KeyKind::EcdsaP256, &["b.test"]);
    let snap = load_str(
        &config(
            dir.path(),
            &["a-rsa", "a-ec", "b-ec"],
            "default_certificate = \"b-ec\"",
        ),
        "t",
        dir.path(),
    )
    .unwrap();
    let tls = snap.listeners[0].tls.as_ref().unwrap();
    let store = CertStore::build(&snap, tls).unwrap();
    assert_eq!(
        store.lookup("a.test").map(<[_]>::len),
        Some(2),
        "RSA and ECDSA share a.test"
    );
    assert_eq!(
        store.lookup("A.Test.").map(<[_]>::len),
        Some(2),
        "names are normalized"
    );
    assert_eq!(
        store.lookup("www.a.test").map(<[_]>::len),
        Some(1),
        "wildcard matches one label"
    );
    assert!(
        store.lookup("x.www.a.test").is_none(),
        "wildcard does not match two labels"
    );
    assert!(store.lookup("c.test").is_none());
    assert_eq!(store.default_set().len(), 1, "default is b-ec's set");
}

#[test]
fn ticket_keys_from_file_reload_and_reject_bad_length() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ticket.key");
    std::fs::write(&path, [7u8; 160]).unwrap();
    let ring = TicketKeys::from_file(&path).unwrap();
    std::fs::write(&path, [1u8; 81]).unwrap();
    let err = ring.rotate().unwrap_err().to_string();
    assert!(err.contains("81 bytes"), "{err}");
    assert!(TicketKeys::from_file(&path).is_err());
}

#[test]
fn generated_certificate_loads_and_names_its_hosts() {
    let dir = tempfile::tempdir().unwrap();
    assert!(crate::selfsigned::ensure_default_certificates(dir.path()).unwrap());
    assert!(
        !crate::selfsigned::ensure_default_certificates(dir.path()).unwrap(),
        "kept across restarts"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("localhost-rsa.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let snap = load_str(
        &config(dir.path(), &["localhost-ecdsa", "localhost-rsa"], ""),
        "t",
        dir.path(),
    )
    .unwrap();
    let hosts: Vec<String> = snap.certificates[1]
        .hosts
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(hosts, ["localhost", "127.0.0.1", "[::1]"]);
}
