//! What an ACME certificate leaves on disk: its account's credentials and its certificate
//! and key, each written whole (a temporary file renamed over the old one) with mode 0600.

use boring::pkey::{PKey, Private};
use boring::x509::X509;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A certificate the CA issued, as stored.
pub(crate) struct Issued {
    pub(crate) chain: Vec<X509>,
    pub(crate) key: PKey<Private>,
}

/// Writes `bytes` to `path` with `mode`, atomically: a reader sees the old file or the new
/// one, never half of either.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    // The mode given to open is masked by the umask; set it exactly.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Where the account for `directory` is kept: one file per CA directory URL.
pub(crate) fn account_path(storage: &Path, directory: &str) -> PathBuf {
    let digest = boring::sha::sha256(directory.as_bytes());
    let id: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    storage.join("accounts").join(format!("{id}.json"))
}

/// Whether `leaf` names every one of `names` (its DNS subjectAltNames).
pub(crate) fn covers(leaf: &boring::x509::X509Ref, names: &[String]) -> bool {
    let Some(sans) = leaf.subject_alt_names() else {
        return false;
    };
    let dns: Vec<String> = sans
        .iter()
        .filter_map(|n| n.dnsname().map(str::to_ascii_lowercase))
        .collect();
    names.iter().all(|n| dns.iter().any(|d| d == n))
}

/// The certificate storage holds for `order`, if it holds one for its names.
pub(crate) fn stored_leaf(order: &sluice_config::AcmeOrder) -> Option<X509> {
    let pem = std::fs::read(order.cert_path()).ok()?;
    let leaf = boring::x509::X509::stack_from_pem(&pem)
        .ok()?
        .into_iter()
        .next()?;
    covers(&leaf, &order.names).then_some(leaf)
}

/// `t` as Unix seconds.
pub(crate) fn unix(t: &boring::asn1::Asn1TimeRef) -> Option<i64> {
    let epoch = boring::asn1::Asn1Time::from_unix(0).ok()?;
    let d = epoch.diff(t).ok()?;
    Some(i64::from(d.days) * 86_400 + i64::from(d.secs))
}

/// Now, as Unix seconds.
pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A certificate's validity, from and until (Unix seconds).
pub(crate) fn validity(leaf: &boring::x509::X509Ref) -> Option<(i64, i64)> {
    Some((unix(leaf.not_before())?, unix(leaf.not_after())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_files_are_0600_in_a_0700_directory_and_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/key.pem");
        write_private(&path, b"one").unwrap();
        write_private(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert!(!path.with_extension("tmp").exists());
    }

    #[test]
    fn accounts_are_kept_per_directory_url() {
        let s = Path::new("/s");
        assert_eq!(
            account_path(s, "https://a/dir"),
            account_path(s, "https://a/dir")
        );
        assert_ne!(
            account_path(s, "https://a/dir"),
            account_path(s, "https://b/dir")
        );
    }

    #[test]
    fn unix_reads_a_certificate_time() {
        let t = boring::asn1::Asn1Time::from_unix(1_800_000_000).unwrap();
        assert_eq!(unix(&t), Some(1_800_000_000));
    }
}
