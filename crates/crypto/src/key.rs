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
    /// The private half lives on key servers (the `keyless` engine); only the public key is
    /// here, to check what they return.
    Remote,
}

/// SHA-256 of a key's DER SubjectPublicKeyInfo: how a key server knows which key a request
/// names.
pub type KeyId = [u8; 32];

/// An engine's precomputed form of a key ([`PrivateKey::engine_form`]).
pub(crate) type EngineForm = Box<dyn std::any::Any + Send + Sync>;

/// A private key loaded once into the engine side; jobs refer to it by `Arc`.
pub struct PrivateKey {
    pub(crate) kind: KeyKind,
    pub(crate) inner: Inner,
    /// The public key in the form aws-lc-rs verifies with.
    pub(crate) public: Vec<u8>,
    /// RSA keys only: the same key as aws-lc's `RSA`, for raw decryption.
    pub(crate) raw_rsa: Option<RawRsa>,
    /// The key in one engine's precomputed form (the mb engine's RSA limbs), made at that
    /// engine's first job with it ([`PrivateKey::engine_form`]).
    pub(crate) engine_form: std::sync::OnceLock<Option<EngineForm>>,
    /// Its id on key servers, when the caller gave one.
    pub(crate) key_id: Option<KeyId>,
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
                engine_form: Default::default(),
                key_id: None,
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
                    engine_form: Default::default(),
                    key_id: None,
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
                engine_form: Default::default(),
                key_id: None,
            });
        }
        Err(KeyError::Unsupported)
    }

    /// The key in an engine's precomputed form, made by `make` on first use and kept for the
    /// key's life; `None` where `make` has none for this key. Opaque here, so that the key
    /// knows nothing of the engines: one engine keeps a form (the mb engine, `mb::key`), and
    /// a second type asked of the same key gets `None`, never another engine's form.
    pub(crate) fn engine_form<T: std::any::Any + Send + Sync>(
        &self,
        make: impl FnOnce(&PrivateKey) -> Option<T>,
    ) -> Option<&T> {
        self.engine_form
            .get_or_init(|| make(self).map(|t| Box::new(t) as EngineForm))
            .as_ref()?
            .downcast_ref()
    }

    /// A key whose private half lives on key servers: `public` is its public key in the form
    /// aws-lc-rs verifies with (for RSA the DER RSAPublicKey, for ECDSA the uncompressed
    /// point, for Ed25519 the 32 bytes), `key_id` its id there. Software engines cannot sign
    /// with it; they fail its jobs with an error that says so.
    pub fn remote(kind: KeyKind, public: Vec<u8>, key_id: KeyId) -> Result<Self, KeyError> {
        let raw_rsa = match kind {
            KeyKind::Rsa(_) => {
                Some(RawRsa::from_public_pkcs1(&public).ok_or(KeyError::Unsupported)?)
            }
            _ => None,
        };
        Ok(PrivateKey {
            kind,
            inner: Inner::Remote,
            public,
            raw_rsa,
            engine_form: Default::default(),
            key_id: Some(key_id),
        })
    }

    /// Gives a locally loaded key its id on key servers, so the `keyless` engine can ask them
    /// (and the local key remains the fallback).
    pub fn with_key_id(mut self, key_id: KeyId) -> Self {
        self.key_id = Some(key_id);
        self
    }

    /// Its id on key servers, if it has one.
    pub fn key_id(&self) -> Option<&KeyId> {
        self.key_id.as_ref()
    }

    /// Whether the private half is in this process (false: only key servers can use it).
    pub fn is_local(&self) -> bool {
        !matches!(self.inner, Inner::Remote)
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
