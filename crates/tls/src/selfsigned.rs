//! Self-signed certificates for the embedded default configuration and for tests.

use crate::TlsError;
use boring::asn1::Asn1Time;
use boring::bn::{BigNum, MsbOption};
use boring::ec::{EcGroup, EcKey};
use boring::hash::MessageDigest;
use boring::nid::Nid;
use boring::pkey::{PKey, Private};
use boring::rsa::Rsa;
use boring::x509::extension::{
    BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
};
use boring::x509::{X509, X509NameBuilder};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Key kinds a self-signed certificate can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// RSA-2048.
    Rsa2048,
    /// ECDSA P-256.
    EcdsaP256,
}

/// Generates a key and a self-signed certificate for `hosts` (DNS names or IP addresses),
/// valid from yesterday for `days` days.
pub fn generate(
    kind: KeyKind,
    hosts: &[&str],
    days: u32,
) -> Result<(X509, PKey<Private>), TlsError> {
    let e = TlsError::boring;
    let key = match kind {
        KeyKind::Rsa2048 => {
            PKey::from_rsa(Rsa::generate(2048).map_err(e("generating an RSA key"))?)
        }
        KeyKind::EcdsaP256 => {
            let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).map_err(e("P-256"))?;
            PKey::from_ec_key(EcKey::generate(&group).map_err(e("generating an ECDSA key"))?)
        }
    }
    .map_err(e("wrapping the key"))?;

    let mut name = X509NameBuilder::new().map_err(e("name"))?;
    name.append_entry_by_nid(
        Nid::COMMONNAME,
        hosts.first().copied().unwrap_or("localhost"),
    )
    .map_err(e("name"))?;
    name.append_entry_by_nid(Nid::ORGANIZATIONNAME, "Sluice self-signed")
        .map_err(e("name"))?;
    let name = name.build();

    let mut b = X509::builder().map_err(e("certificate"))?;
    b.set_version(2).map_err(e("version"))?;
    let mut serial = BigNum::new().map_err(e("serial"))?;
    serial
        .rand(127, MsbOption::MAYBE_ZERO, false)
        .map_err(e("serial"))?;
    let serial = serial.to_asn1_integer().map_err(e("serial"))?;
    b.set_serial_number(&serial).map_err(e("serial"))?;
    b.set_subject_name(&name).map_err(e("subject"))?;
    b.set_issuer_name(&name).map_err(e("issuer"))?;
    b.set_pubkey(&key).map_err(e("public key"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let not_before = Asn1Time::from_unix(now - 86_400).map_err(e("validity"))?;
    let not_after = Asn1Time::days_from_now(days).map_err(e("validity"))?;
    b.set_not_before(&not_before).map_err(e("validity"))?;
    b.set_not_after(&not_after).map_err(e("validity"))?;
    let basic = BasicConstraints::new()
        .critical()
        .build()
        .map_err(e("extension"))?;
    b.append_extension(&basic).map_err(e("extension"))?;
    let mut usage = KeyUsage::new();
    usage.critical().digital_signature();
    if kind == KeyKind::Rsa2048 {
        usage.key_encipherment();
    }
    let usage = usage.build().map_err(e("extension"))?;
    b.append_extension(&usage).map_err(e("extension"))?;
    let eku = ExtendedKeyUsage::new()
        .server_auth()
        .build()
        .map_err(e("extension"))?;
    b.append_extension(&eku).map_err(e("extension"))?;
    let san = subject_alt_names(hosts)
        .build(&b.x509v3_context(None, None))
        .map_err(e("subjectAltName"))?;
    b.append_extension(&san).map_err(e("extension"))?;
    b.sign(&key, MessageDigest::sha256())
        .map_err(e("signing"))?;
    Ok((b.build(), key))
}

/// `hosts` (DNS names or IP addresses) as a subjectAltName extension to build.
pub fn subject_alt_names(hosts: &[&str]) -> SubjectAlternativeName {
    let mut san = SubjectAlternativeName::new();
    for h in hosts {
        if h.parse::<std::net::IpAddr>().is_ok() {
            san.ip(h);
        } else {
            san.dns(h);
        }
    }
    san
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
