//! One certificate chain and its private key as a BoringSSL `SSL_CREDENTIAL`.
//!
//! The `boring` crate exposes credentials but not yet a constructor for X.509 ones, so the
//! two calls that build one go through `boring-sys` directly.

use crate::TlsError;
use boring::error::ErrorStack;
use boring::ssl::SslCredential;
use foreign_types::ForeignType;
use sluice_config::Certificate;
use sluice_crypto::{EngineKind, PrivateKey};
use std::sync::Arc;

/// Builds a credential holding `cert`'s chain and private key.
#[expect(
    unsafe_code,
    reason = "boring 5 has no safe constructor for X.509 credentials"
)]
pub(crate) fn x509_credential(
    cert: &Certificate,
    engines: Vec<EngineKind>,
) -> Result<SslCredential, TlsError> {
    let ders = cert
        .chain
        .iter()
        .map(|x| x.to_der())
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::boring("encoding certificate chain"))?;

    // SAFETY: SSL_CREDENTIAL_new_x509 returns a new credential with one reference, or null.
    // `from_ptr` takes over that reference, so it is freed exactly once when dropped.
    let credential = unsafe {
        let raw = boring_sys::SSL_CREDENTIAL_new_x509();
        if raw.is_null() {
            return Err(TlsError::Boring {
                context: "allocating a credential",
                source: ErrorStack::get(),
            });
        }
        SslCredential::from_ptr(raw)
    };

    let mut buffers = Vec::with_capacity(ders.len());
    for der in &ders {
        // SAFETY: CRYPTO_BUFFER_new copies `len` bytes from a valid slice; a null pool means an
        // unpooled buffer. The result is owned here and freed below.
        let buffer =
            unsafe { boring_sys::CRYPTO_BUFFER_new(der.as_ptr(), der.len(), std::ptr::null_mut()) };
        if buffer.is_null() {
            free_buffers(&buffers);
            return Err(TlsError::Boring {
                context: "copying a certificate",
                source: ErrorStack::get(),
            });
        }
        buffers.push(buffer);
    }
    // SAFETY: `credential` is a live X.509 credential and `buffers` holds `len` valid
    // CRYPTO_BUFFER pointers. set1 takes its own references, so ours are released after.
    let chain_ok = unsafe {
        boring_sys::SSL_CREDENTIAL_set1_cert_chain(
            credential.as_ptr(),
            buffers.as_ptr(),
            buffers.len(),
        )
    };
    free_buffers(&buffers);
    if chain_ok != 1 {
        return Err(TlsError::Boring {
            context: "setting a certificate chain",
            source: ErrorStack::get(),
        });
    }
    // The key goes to the offload layer's engines when the crypto crate can sign with it
    // (every key the configuration accepts); BoringSSL keeps it otherwise.
    let pkcs8 = cert
        .key
        .private_key_to_der_pkcs8()
        .map_err(TlsError::boring("encoding a private key"))?;
    if let Ok(key) = PrivateKey::from_pkcs8(&pkcs8) {
        crate::offload::attach(&credential, Arc::new(key), engines)?;
        return Ok(credential);
    }
    // SAFETY: both pointers are live for the call; set1 takes its own reference to the key.
    let key_ok = unsafe {
        boring_sys::SSL_CREDENTIAL_set1_private_key(credential.as_ptr(), cert.key.as_ptr())
    };
    if key_ok != 1 {
        return Err(TlsError::Boring {
            context: "setting a private key",
            source: ErrorStack::get(),
        });
    }
    Ok(credential)
}

#[expect(
    unsafe_code,
    reason = "releasing CRYPTO_BUFFERs allocated through boring-sys"
)]
fn free_buffers(buffers: &[*mut boring_sys::CRYPTO_BUFFER]) {
    for &b in buffers {
        // SAFETY: each pointer came from CRYPTO_BUFFER_new above and is released once.
        unsafe { boring_sys::CRYPTO_BUFFER_free(b) };
    }
}
