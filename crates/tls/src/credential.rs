//! One certificate chain and its private key as a BoringSSL `SSL_CREDENTIAL`.
//!
//! The `boring` crate exposes credentials but not yet a constructor for X.509 ones, so the
//! two calls that build one go through `boring-sys` directly.

use crate::TlsError;
use boring::error::ErrorStack;
use boring::ssl::SslCredential;
use foreign_types::{ForeignType, ForeignTypeRef};
use sluice_config::Certificate;
use sluice_crypto::{EngineKind, KeyKind, PrivateKey};
use std::sync::Arc;

/// Builds a credential holding `cert`'s chain and private key, its private-key operations on
/// `engines` (BoringSSL's own when the key is not one the crypto crate signs with).
pub fn x509_credential(
    cert: &Certificate,
    engines: Vec<EngineKind>,
    fallback_local: bool,
) -> Result<SslCredential, TlsError> {
    let credential = chain_credential(&cert.chain)?;
    // With the keyless engine the key gets its id on key servers (from the certificate, so
    // a certificate without a key file works); without a local key, or with fallback "none",
    // only the public half is kept.
    let keyless = engines.contains(&EngineKind::Keyless);
    let local = cert.key.as_ref().filter(|_| !keyless || fallback_local);
    let Some(local) = local else {
        let key = remote_key(&cert.chain[0])?;
        crate::offload::attach(&credential, Arc::new(key), engines)?;
        return Ok(credential);
    };
    // The key goes to the offload layer's engines when the crypto crate can sign with it
    // (every key the configuration accepts); BoringSSL keeps it otherwise.
    let pkcs8 = local
        .private_key_to_der_pkcs8()
        .map_err(TlsError::boring("encoding a private key"))?;
    if let Ok(mut key) = PrivateKey::from_pkcs8(&pkcs8) {
        if keyless {
            key = key.with_key_id(key_id(&cert.chain[0])?);
        }
        let key = Arc::new(key);
        // Once per kind of key: what its signatures cost inline (the dashboard's CPU saved)
        // and, for RSA, in an mb batch (where the engine computes a partial batch).
        sluice_crypto::calibrate(&key);
        crate::offload::attach(&credential, key, engines)?;
        return Ok(credential);
    }
    set_key(&credential, local)?;
    Ok(credential)
}

/// A credential for `chain` whose key BoringSSL holds and signs with on the calling thread:
/// for certificates that serve a few handshakes only, such as an ACME challenge's.
pub fn inline_credential(
    chain: &[boring::x509::X509],
    key: &boring::pkey::PKeyRef<boring::pkey::Private>,
) -> Result<SslCredential, TlsError> {
    let credential = chain_credential(chain)?;
    set_key(&credential, key)?;
    Ok(credential)
}

/// Staples `response` (a DER OCSP response) to every handshake `credential` serves to a
/// client that asks for status.
#[expect(
    unsafe_code,
    reason = "boring 5 has no safe setter for a credential's OCSP response"
)]
pub(crate) fn set_ocsp_response(
    credential: &SslCredential,
    response: &[u8],
) -> Result<(), TlsError> {
    // SAFETY: CRYPTO_BUFFER_new copies `len` bytes from a valid slice (null pool: unpooled);
    // set1 takes its own reference, so ours is released right after.
    let ok = unsafe {
        let buffer =
            boring_sys::CRYPTO_BUFFER_new(response.as_ptr(), response.len(), std::ptr::null_mut());
        if buffer.is_null() {
            0
        } else {
            let ok = boring_sys::SSL_CREDENTIAL_set1_ocsp_response(credential.as_ptr(), buffer);
            boring_sys::CRYPTO_BUFFER_free(buffer);
            ok
        }
    };
    if ok != 1 {
        return Err(TlsError::Boring {
            context: "stapling an OCSP response",
            source: ErrorStack::get(),
        });
    }
    Ok(())
}

/// Gives `credential` its private key, which BoringSSL then signs with.
#[expect(
    unsafe_code,
    reason = "boring 5 has no safe setter for X.509 credentials' keys"
)]
fn set_key(
    credential: &SslCredential,
    key: &boring::pkey::PKeyRef<boring::pkey::Private>,
) -> Result<(), TlsError> {
    // SAFETY: both pointers are live for the call; set1 takes its own reference to the key.
    let key_ok =
        unsafe { boring_sys::SSL_CREDENTIAL_set1_private_key(credential.as_ptr(), key.as_ptr()) };
    if key_ok != 1 {
        return Err(TlsError::Boring {
            context: "setting a private key",
            source: ErrorStack::get(),
        });
    }
    Ok(())
}

/// A credential holding `chain` and no key yet.
#[expect(
    unsafe_code,
    reason = "boring 5 has no safe constructor for X.509 credentials"
)]
fn chain_credential(chain: &[boring::x509::X509]) -> Result<SslCredential, TlsError> {
    let ders = chain
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

/// The id key servers know the certificate's key by.
fn key_id(leaf: &boring::x509::X509) -> Result<sluice_crypto::KeyId, TlsError> {
    let pk = leaf
        .public_key()
        .map_err(TlsError::boring("reading the certificate's public key"))?;
    sluice_keyless::key_id_of(&pk).map_err(TlsError::boring("hashing the public key"))
}

/// The public half of a certificate's key, for a key that lives on key servers only.
fn remote_key(leaf: &boring::x509::X509) -> Result<PrivateKey, TlsError> {
    use boring::pkey::Id;
    let e = TlsError::boring;
    let pk = leaf
        .public_key()
        .map_err(e("reading the certificate's public key"))?;
    let key_id = key_id(leaf)?;
    let (kind, public) = match pk.id() {
        Id::RSA => (
            KeyKind::Rsa(pk.bits()),
            pk.rsa()
                .and_then(|r| r.public_key_to_der_pkcs1())
                .map_err(e("encoding an RSA public key"))?,
        ),
        Id::EC => {
            let ec = pk.ec_key().map_err(e("reading an EC public key"))?;
            let mut ctx = boring::bn::BigNumContext::new().map_err(e("EC point"))?;
            let point = ec
                .public_key()
                .to_bytes(
                    ec.group(),
                    boring::ec::PointConversionForm::UNCOMPRESSED,
                    &mut ctx,
                )
                .map_err(e("encoding an EC public key"))?;
            let kind = match pk.bits() {
                256 => KeyKind::EcdsaP256,
                384 => KeyKind::EcdsaP384,
                _ => return Err(TlsError::UnsupportedRemoteKey),
            };
            (kind, point)
        }
        Id::ED25519 => {
            let mut raw = [0u8; 32];
            let len = pk
                .raw_public_key(&mut raw)
                .map_err(e("reading an Ed25519 public key"))?
                .len();
            (KeyKind::Ed25519, raw[..len].to_vec())
        }
        _ => return Err(TlsError::UnsupportedRemoteKey),
    };
    PrivateKey::remote(kind, public, key_id).map_err(|_| TlsError::UnsupportedRemoteKey)
}
