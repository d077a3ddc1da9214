//! Staples kept on disk, so that a restart or an upgrade staples from its first handshake
//! instead of after its first fetch (and staples at all while the responder is down).
//!
//! One file per certificate, named by the SHA-256 of its leaf (`<dir>/<hex>.der`), written
//! whole (temporary file, then rename) after each `good` answer and removed after any other.
//! A kept response is used only while it still says `good` for this certificate and its
//! nextUpdate is ahead; the directory is `[acme] storage`'s `ocsp/` ([`set_dir`]).

use super::codec;
use boring::x509::X509;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

static DIR: RwLock<Option<PathBuf>> = RwLock::new(None);

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Where staples are kept from now on (`None`: not kept).
pub fn set_dir(dir: Option<PathBuf>) {
    *DIR.write().unwrap_or_else(|e| e.into_inner()) = dir;
}

fn path(leaf: &X509) -> Option<PathBuf> {
    let dir = DIR.read().unwrap_or_else(|e| e.into_inner()).clone()?;
    let digest = boring::sha::sha256(&leaf.to_der().ok()?);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Some(dir.join(format!("{hex}.der")))
}

/// The kept response for `chain` (leaf, issuer, ...), if it is still a current `good`.
pub(crate) fn load(chain: &[X509]) -> Option<(Vec<u8>, codec::Answer)> {
    let (leaf, issuer) = (chain.first()?, chain.get(1)?);
    let der = std::fs::read(path(leaf)?).ok()?;
    let id = codec::cert_id(&leaf.to_der().ok()?, &issuer.to_der().ok()?).ok()?;
    let answer = codec::answer(&der, &id, now()).ok()?;
    let current =
        answer.status == codec::Status::Good && answer.next_update.is_some_and(|n| n > now());
    current.then_some((der, answer))
}

/// The staple kept for `cert`, when it staples and one is current: what a slot is built
/// with.
pub fn for_certificate(cert: &sluice_config::Certificate) -> Option<Arc<Vec<u8>>> {
    if !cert.ocsp || cert.placeholder {
        return None;
    }
    load(&cert.chain).map(|(der, _)| Arc::new(der))
}

/// Keeps `der` (a `good` answer) for `leaf`; a failure is logged, never fatal.
pub(crate) fn keep(leaf: &X509, der: &[u8]) {
    let Some(path) = path(leaf) else { return };
    let written = (|| {
        use std::io::Write as _;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(der)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot keep the OCSP response on disk; a restart staples after its first fetch");
    }
}

/// Forgets what is kept for `leaf` (its status is no longer `good`).
pub(crate) fn forget(leaf: &X509) {
    if let Some(path) = path(leaf) {
        let _ = std::fs::remove_file(path);
    }
}
