use crate::SignatureScheme;
use crate::raw_rsa::RawRsa;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P384_SHA384_ASN1_SIGNING, EcdsaKeyPair, Ed25519KeyPair,
    KeyPair, RsaKeyPair,
};

/// The kind and size of a private key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// RSA with this many modulus bits.
    Rsa(u32),
    /// ECDSA on P-256.
    EcdsaP256,
    /// ECDSA on P-384.
    EcdsaP384,
    /// Ed25519.
    Ed25519,
}

/// Why a key could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Not an RSA (2048-8192), ECDSA P-256/P-384 or Ed25519 key in PKCS#8.
    #[error(
        "unsupported or malformed private key: use RSA (2048 bits or more), ECDSA P-256 or P-384, or Ed25519, in PKCS#8"
    )]
    Unsupported,
}

pub(crate) enum Inner {
    Rsa(RsaKeyPair),
    Ecdsa(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

/// A private key loaded once into the engine side; jobs refer to it by `Arc`.
pub struct PrivateKey {
    pub(crate) kind: KeyKind,
    pub(crate) inner: Inner,
    /// The public key in the form aws-lc-rs verifies with.
    pub(crate) public: Vec<u8>,
    /// RSA keys only: the same key as aws-lc's `RSA`, for raw decryption.
    pub(crate) raw_rsa: Option<RawRsa>,
    /// RSA keys only: the mb engine's form, made at its first mb job.
    pub(crate) mb: std::sync::OnceLock<Option<crate::mb::key::MbKey>>,
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("PrivateKey")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl PrivateKey {
    /// Loads a PKCS#8 (DER) private key of a supported kind.
    pub fn from_pkcs8(der: &[u8]) -> Result<Self, KeyError> {
        if let Ok(k) = RsaKeyPair::from_pkcs8(der) {
            let bits = (k.public_modulus_len() * 8) as u32;
            let public = k.public_key().as_ref().to_vec();
            return Ok(PrivateKey {
                kind: KeyKind::Rsa(bits),
                inner: Inner::Rsa(k),
                public,
                raw_rsa: Some(RawRsa::from_pkcs8(der).ok_or(KeyError::Unsupported)?),
                mb: Default::default(),
            });
        }
        for (alg, kind) in [
            (&ECDSA_P256_SHA256_ASN1_SIGNING, KeyKind::EcdsaP256),
            (&ECDSA_P384_SHA384_ASN1_SIGNING, KeyKind::EcdsaP384),
        ] {
            if let Ok(k) = EcdsaKeyPair::from_pkcs8(alg, der) {
                let public = k.public_key().as_ref().to_vec();
                return Ok(PrivateKey {
                    kind,
                    inner: Inner::Ecdsa(k),
                    public,
                    raw_rsa: None,
                    mb: Default::default(),
                });
            }
        }
        if let Ok(k) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
            let public = k.public_key().as_ref().to_vec();
            return Ok(PrivateKey {
                kind: KeyKind::Ed25519,
                inner: Inner::Ed25519(k),
                public,
                raw_rsa: None,
                mb: Default::default(),
            });
        }
        Err(KeyError::Unsupported)
    }

    /// The mb engine's form of an RSA key (computed once); `None` for other keys and for
    /// RSA keys the kernel has no size for.
    pub(crate) fn mb(&self) -> Option<&crate::mb::key::MbKey> {
        self.mb
            .get_or_init(|| {
                let c = self.raw_rsa.as_ref()?.components()?;
                crate::mb::key::MbKey::new(&c)
            })
            .as_ref()
    }

    /// Its kind and size.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// The schemes it can sign, in the server's order of preference.
    pub fn schemes(&self) -> &'static [SignatureScheme] {
        use SignatureScheme::*;
        match self.kind {
            KeyKind::Rsa(_) => &[
                RsaPssSha256,
                RsaPssSha384,
                RsaPssSha512,
                RsaPkcs1Sha256,
                RsaPkcs1Sha384,
                RsaPkcs1Sha512,
            ],
            KeyKind::EcdsaP256 => &[EcdsaP256Sha256],
            KeyKind::EcdsaP384 => &[EcdsaP384Sha384],
            KeyKind::Ed25519 => &[Ed25519],
        }
    }
}
