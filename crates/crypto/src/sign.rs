use crate::key::Inner;
use crate::{EngineKind, KeyKind, PrivateKey, SignatureScheme, VerifyPolicy};
use aws_lc_rs::digest::{self, Digest};
use aws_lc_rs::signature::{self as sig, RsaEncoding, UnparsedPublicKey, VerificationAlgorithm};
use sluice_offload::{EngineError, Job};
use std::sync::Arc;

/// One signature to make: prepared (hashed) on the caller, signed by an engine, verified
/// before release.
#[derive(Clone)]
pub struct SignJob {
    key: Arc<PrivateKey>,
    scheme: SignatureScheme,
    message: Arc<[u8]>,
    /// The prepared digest (none for Ed25519, which signs the message itself).
    digest: Option<Digest>,
    verify: VerifyPolicy,
    /// Engines allowed to run it besides the software one; `None`: all of the chain.
    engines: Option<Arc<[EngineKind]>>,
}

impl std::fmt::Debug for SignJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignJob")
            .field("key", &self.key.kind)
            .field("scheme", &self.scheme)
            .finish_non_exhaustive()
    }
}

struct Algorithms {
    hash: Option<&'static digest::Algorithm>,
    rsa: Option<&'static dyn RsaEncoding>,
    verify: &'static dyn VerificationAlgorithm,
}

fn algorithms(scheme: SignatureScheme) -> Algorithms {
    use SignatureScheme::*;
    let a = |hash, rsa, verify| Algorithms {
        hash: Some(hash),
        rsa,
        verify,
    };
    match scheme {
        RsaPkcs1Sha256 => a(
            &digest::SHA256,
            Some(&sig::RSA_PKCS1_SHA256),
            &sig::RSA_PKCS1_2048_8192_SHA256,
        ),
        RsaPkcs1Sha384 => a(
            &digest::SHA384,
            Some(&sig::RSA_PKCS1_SHA384),
            &sig::RSA_PKCS1_2048_8192_SHA384,
        ),
        RsaPkcs1Sha512 => a(
            &digest::SHA512,
            Some(&sig::RSA_PKCS1_SHA512),
            &sig::RSA_PKCS1_2048_8192_SHA512,
        ),
        RsaPssSha256 => a(
            &digest::SHA256,
            Some(&sig::RSA_PSS_SHA256),
            &sig::RSA_PSS_2048_8192_SHA256,
        ),
        RsaPssSha384 => a(
            &digest::SHA384,
            Some(&sig::RSA_PSS_SHA384),
            &sig::RSA_PSS_2048_8192_SHA384,
        ),
        RsaPssSha512 => a(
            &digest::SHA512,
            Some(&sig::RSA_PSS_SHA512),
            &sig::RSA_PSS_2048_8192_SHA512,
        ),
        EcdsaP256Sha256 => a(&digest::SHA256, None, &sig::ECDSA_P256_SHA256_ASN1),
        EcdsaP384Sha384 => a(&digest::SHA384, None, &sig::ECDSA_P384_SHA384_ASN1),
        Ed25519 => Algorithms {
            hash: None,
            rsa: None,
            verify: &sig::ED25519,
        },
    }
}

impl SignJob {
    /// Prepares a signature of `message` with `key`; `None` when the key cannot sign with
    /// `scheme`.
    pub fn new(
        key: Arc<PrivateKey>,
        scheme: SignatureScheme,
        message: &[u8],
        verify: VerifyPolicy,
    ) -> Option<Self> {
        if !key.schemes().contains(&scheme) {
            return None;
        }
        let digest = algorithms(scheme).hash.map(|h| digest::digest(h, message));
        Some(SignJob {
            key,
            scheme,
            message: message.into(),
            digest,
            verify,
            engines: None,
        })
    }

    /// Restricts the job to these engines (besides the software one that ends every chain):
    /// a certificate's own `offload_engines`.
    pub fn only(mut self, engines: Option<Arc<[EngineKind]>>) -> Self {
        self.engines = engines;
        self
    }

    /// Whether `engine` may run this job.
    pub fn allows(&self, engine: EngineKind) -> bool {
        self.engines.as_ref().is_none_or(|e| e.contains(&engine))
    }

    /// The scheme.
    pub fn scheme(&self) -> SignatureScheme {
        self.scheme
    }

    /// The key's kind.
    pub fn key_kind(&self) -> KeyKind {
        self.key.kind
    }

    /// The primitive alone: the private-key operation on the prepared input.
    pub fn primitive(&self) -> Result<Vec<u8>, EngineError> {
        let failed =
            |what: &str| EngineError::Failed(format!("{what} failed for {:?}", self.scheme));
        let algs = algorithms(self.scheme);
        match (&self.key.inner, &self.digest) {
            (Inner::Rsa(k), Some(d)) => {
                let mut out = vec![0; k.public_modulus_len()];
                let enc = algs.rsa.ok_or_else(|| failed("RSA encoding"))?;
                k.sign_digest(enc, d, &mut out)
                    .map_err(|_| failed("RSA signing"))?;
                Ok(out)
            }
            (Inner::Ecdsa(k), Some(d)) => Ok(k
                .sign_digest(d)
                .map_err(|_| failed("ECDSA signing"))?
                .as_ref()
                .to_vec()),
            (Inner::Ed25519(k), None) => Ok(k.sign(&self.message).as_ref().to_vec()),
            _ => Err(failed("preparing")),
        }
    }

    /// The finish step: checks a signature against the public key.
    pub fn check(&self, signature: &[u8]) -> Result<(), EngineError> {
        let must = self.scheme.is_rsa() || self.verify == VerifyPolicy::All;
        if !must {
            return Ok(());
        }
        UnparsedPublicKey::new(algorithms(self.scheme).verify, &self.key.public)
            .verify(&self.message, signature)
            .map_err(|_| {
                EngineError::WrongResult(format!(
                    "{:?} signature does not verify with the public key",
                    self.scheme
                ))
            })
    }
}

impl Job for SignJob {
    type Output = Vec<u8>;

    /// Different keys of one kind and size share a batch.
    fn batch_key(&self) -> u64 {
        match self.key.kind {
            KeyKind::Rsa(bits) => u64::from(bits),
            KeyKind::EcdsaP256 => 1 << 32,
            KeyKind::EcdsaP384 => 2 << 32,
            KeyKind::Ed25519 => 3 << 32,
        }
    }
}

/// Primitive then finish: what the software engines (`inline`, `pool`) run.
pub fn sign(job: &SignJob) -> Result<Vec<u8>, EngineError> {
    let signature = job.primitive()?;
    job.check(&signature)?;
    Ok(signature)
}
