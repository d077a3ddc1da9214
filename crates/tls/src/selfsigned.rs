//! Self-signed certificates for the embedded default configuration and for tests.

use crate::TlsError;
use boring::asn1::Asn1Time;
use boring::pkey::{PKey, Private};
use boring::x509::X509;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use sluice_config::selfsigned::{KeyKind, subject_alt_names};

/// Generates a key and a self-signed certificate for `hosts` (DNS names or IP addresses),
/// valid from yesterday for `days` days.
pub fn generate(
    kind: KeyKind,
    hosts: &[&str],
    days: u32,
) -> Result<(X509, PKey<Private>), TlsError> {
    sluice_config::selfsigned::generate(kind, hosts, days, "Sluice self-signed")
        .map_err(TlsError::boring("generating a self-signed certificate"))
}

/// Writes `stem.crt` (mode 0644) and `stem.key` (mode 0600) into `dir`.
pub fn write_pair(
    dir: &Path,
    stem: &str,
    cert: &X509,
    key: &PKey<Private>,
) -> Result<(PathBuf, PathBuf), TlsError> {
    let cert_path = dir.join(format!("{stem}.crt"));
    let key_path = dir.join(format!("{stem}.key"));
    let cert_pem = cert
        .to_pem()
        .map_err(TlsError::boring("encoding a certificate"))?;
    let key_pem = key
        .private_key_to_pem_pkcs8()
        .map_err(TlsError::boring("encoding a key"))?;
    write_file(&key_path, &key_pem, 0o600)?;
    write_file(&cert_path, &cert_pem, 0o644)?;
    Ok((cert_path, key_path))
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    let io = |source| TlsError::Write {
        path: path.display().to_string(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        opts.mode(mode);
        let mut f = opts.open(&tmp).map_err(io)?;
        // The mode passed to open is masked by the umask; set it exactly.
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io)?;
        f.write_all(bytes).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    #[cfg(not(unix))]
    {
        let _ = mode;
        let mut f = opts.open(&tmp).map_err(io)?;
        f.write_all(bytes).map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)
}

/// Where the embedded default keeps its certificates: `$XDG_STATE_HOME/sluice`, else
/// `~/.local/state/sluice`, else `./sluice-state` (the gateway's default, and the key
/// server demo's, so both use the same keys).
pub fn default_state_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("sluice");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home).join(".local/state/sluice");
    }
    PathBuf::from("sluice-state")
}

/// The default certificates: `localhost-ecdsa` and `localhost-rsa` for `localhost`,
/// `127.0.0.1` and `::1`. Kept across restarts; regenerated when missing, unreadable or
/// within a week of expiry. Returns whether anything was generated.
pub fn ensure_default_certificates(dir: &Path) -> Result<bool, TlsError> {
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.display().to_string(),
        source,
    })?;
    let hosts = ["localhost", "127.0.0.1", "::1"];
    let mut generated = false;
    for (stem, kind) in [
        ("localhost-ecdsa", KeyKind::EcdsaP256),
        ("localhost-rsa", KeyKind::Rsa2048),
    ] {
        if still_good(
            &dir.join(format!("{stem}.crt")),
            &dir.join(format!("{stem}.key")),
        ) {
            continue;
        }
        let (cert, key) = generate(kind, &hosts, 365)?;
        write_pair(dir, stem, &cert, &key)?;
        generated = true;
    }
    Ok(generated)
}

fn still_good(cert: &Path, key: &Path) -> bool {
    let (Ok(cert), Ok(key)) = (std::fs::read(cert), std::fs::read(key)) else {
        return false;
    };
    let (Ok(cert), Ok(key)) = (X509::from_pem(&cert), PKey::private_key_from_pem(&key)) else {
        return false;
    };
    let matches = cert
        .public_key()
        .map(|pk| pk.public_eq(&key))
        .unwrap_or(false);
    let week = Asn1Time::days_from_now(7).ok();
    let fresh = week.is_some_and(|w| cert.not_after() > w);
    matches && fresh
}
