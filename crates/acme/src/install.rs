//! Putting an issued certificate in force: in the live certificate slots every listener
//! reads, whichever gateway ordered it (this one, or another of the fleet).

use crate::storage::{Issued, validity};
use sluice_config::Certificate;
use sluice_tls::live;

/// Puts an issued certificate in force (OCSP-stapled when the configuration's entry for it
/// is); returns its validity.
pub(crate) fn install(name: &str, issued: Issued) -> Result<(i64, i64), String> {
    let ocsp = live().acme_current(name).is_none_or(|c| c.ocsp);
    let leaf = issued.chain[0].clone();
    let valid = validity(&leaf).ok_or("the certificate has no readable validity")?;
    let key_type = match issued.key.id() {
        boring::pkey::Id::RSA => sluice_config::KeyType::Rsa(issued.key.bits()),
        _ => sluice_config::KeyType::Ecdsa(issued.key.bits()),
    };
    let cert = Certificate {
        name: name.to_owned(),
        chain: issued.chain,
        key: Some(issued.key),
        key_type,
        hosts: Vec::new(),
        offload_engines: None,
        fingerprint: [0; 32],
        acme: None,
        placeholder: false,
        ocsp,
        // Only the chain and key are swapped in; the slot keeps serving its names.
        client_auth: None,
    };
    let staple = sluice_tls::ocsp::kept::for_certificate(&cert);
    let served = live()
        .install(std::sync::Arc::new(cert), staple)
        .map_err(|e| format!("putting the certificate in force: {e}"))?;
    if !served {
        tracing::info!(certificate = %name, "no listener serves this certificate; it is stored for the next load");
    }
    Ok(valid)
}
