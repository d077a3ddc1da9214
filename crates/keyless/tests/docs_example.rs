//! The key server's configuration in docs/features.md (the ```toml block tagged `keyserver`,
//! which crates/config/tests/docs_examples.rs skips) loads as `sluice-keyserver --check`
//! would load it: parsed by `ServerConfig::parse`, then its files read by `KeyServer::bind`.
//! The files it names are made first in a temporary folder: the key server's certificate and
//! key, a client CA, and the key to serve (mode 0600, as the key server requires).

use sluice_config::selfsigned::{KeyKind, generate};
use sluice_keyless::{KeyServer, ServerConfig};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The document with the key server's configuration.
const DOC: &str = "docs/features.md";

/// The one block of [`DOC`] tagged ```toml keyserver, with the line its text starts on.
fn keyserver_block() -> (usize, String) {
    let md = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(DOC),
    )
    .unwrap();
    let mut found = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in md.lines().enumerate() {
        let fence = line.trim_start();
        match &mut current {
            None if fence
                .strip_prefix("```toml")
                .is_some_and(|t| t.trim() == "keyserver") =>
            {
                current = Some((i + 2, String::new()));
            }
            None => {}
            Some(_) if fence.starts_with("```") => found.extend(current.take()),
            Some((_, text)) => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    assert_eq!(
        found.len(),
        1,
        "{DOC}: one ```toml keyserver block, found {}",
        found.len()
    );
    found.remove(0)
}

/// Writes a generated certificate at `cert` and its key (mode 0600) at `key`, which must be
/// in the test's folder `dir`.
fn pair(dir: &Path, cert: &Path, key: Option<&Path>) {
    let (c, k) = generate(KeyKind::EcdsaP256, &["localhost"], 30, "docs").unwrap();
    for p in [Some(cert), key].into_iter().flatten() {
        assert!(
            p.starts_with(dir),
            "{} is outside the test's folder",
            p.display()
        );
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    }
    std::fs::write(cert, c.to_pem().unwrap()).unwrap();
    if let Some(key) = key {
        std::fs::write(key, k.private_key_to_pem_pkcs8().unwrap()).unwrap();
        std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

#[tokio::test]
async fn the_key_server_configuration_in_the_docs_loads() {
    let (line, text) = keyserver_block();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut config = ServerConfig::parse(&text, &dir.join("keyserver.toml"))
        .unwrap_or_else(|e| panic!("{DOC}:{line} (the keyserver block, its line 1): {e}"));
    pair(dir, &config.certificate, Some(&config.key));
    if let Some(ca) = &config.client_ca {
        pair(dir, ca, None);
    }
    for k in &config.keys {
        // Only the key is served: its certificate goes aside.
        pair(dir, &k.file.with_extension("fixture.crt"), Some(&k.file));
    }
    // The example's ports may be taken here; what binds on them is not what is checked.
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.metrics = config.metrics.map(|_| "127.0.0.1:0".parse().unwrap());
    KeyServer::bind(&config)
        .await
        .unwrap_or_else(|e| panic!("{DOC}:{line} (the keyserver block, its line 1): {e}"));
}
