use crate::key::Inner;
use crate::key::{KeyId, KeyKind, PrivateKey};
use crate::policy::{EngineKind, VerifyPolicy};
use crate::scheme::SignatureScheme;
use aws_lc_rs::digest::{self, Digest};
use aws_lc_rs::signature::{self as sig, RsaEncoding, UnparsedPublicKey, VerificationAlgorithm};
use sluice_offload::{EngineError, Job};
use std::sync::Arc;

/// One private-key operation: prepared on the caller, computed by an engine, checked before
/// release.
#[derive(Clone)]
pub struct KeyJob {
    pub(crate) key: Arc<PrivateKey>,
    pub(crate) op: Operation,
    verify: VerifyPolicy,
    /// Engines allowed to run it besides the software one; `None`: all of the chain.
    engines: Option<Arc<[EngineKind]>>,
}

#[derive(Clone)]
pub(crate) enum Operation {
    /// A handshake signature.
    Sign {
        scheme: SignatureScheme,
        message: Arc<[u8]>,
        /// The prepared digest (none for Ed25519, which signs the message itself).
        digest: Option<Digest>,
    },
    /// Raw RSA decryption of a TLS 1.2 RSA key exchange: the caller checks the padding.
    Decrypt { ciphertext: Arc<[u8]> },
}

/// A job's input as a remote engine sends it.
#[derive(Debug, Clone, Copy)]
pub enum RemoteInput<'a> {
    /// Sign `message` with `scheme`.
    Sign {
        /// The scheme.
        scheme: SignatureScheme,
        /// The whole message.
        message: &'a [u8],
    },
    /// Raw RSA decryption.
    Decrypt {
        /// The ciphertext.
        ciphertext: &'a [u8],
    },
}

/// Which private-key operation a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationKind {
    /// A signature with this scheme.
    Sign(SignatureScheme),
    /// Raw RSA decryption.
    Decrypt,
}

impl std::fmt::Debug for KeyJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyJob")
            .field("key", &self.key.kind)
            .field("operation", &self.operation())
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

impl KeyJob {
    /// Prepares a signature of `message` with `key`; `None` when the key cannot sign with
    /// `scheme`.
    pub fn sign(
        key: Arc<PrivateKey>,
        scheme: SignatureScheme,
        message: &[u8],
        verify: VerifyPolicy,
    ) -> Option<Self> {
        if !key.schemes().contains(&scheme) {
            return None;
        }
        let digest = algorithms(scheme).hash.map(|h| digest::digest(h, message));
        Some(KeyJob {
            key,
            op: Operation::Sign {
                scheme,
                message: message.into(),
                digest,
            },
            verify,
            engines: None,
        })
    }

    /// Prepares the raw RSA decryption of `ciphertext` (TLS 1.2 RSA key exchange); `None`
    /// when `key` is not RSA or the ciphertext is not exactly the modulus length.
    pub fn decrypt(key: Arc<PrivateKey>, ciphertext: &[u8]) -> Option<Self> {
        let rsa = key.raw_rsa.as_ref()?;
        if ciphertext.len() != rsa.len() {
            return None;
        }
        Some(KeyJob {
            key,
            op: Operation::Decrypt {
                ciphertext: ciphertext.into(),
            },
            verify: VerifyPolicy::Rsa,
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

    /// What the job does.
    pub fn operation(&self) -> OperationKind {
        match &self.op {
            Operation::Sign { scheme, .. } => OperationKind::Sign(*scheme),
            Operation::Decrypt { .. } => OperationKind::Decrypt,
        }
    }

    /// The key's kind.
    pub fn key_kind(&self) -> KeyKind {
        self.key.kind
    }

    /// The key's id on key servers, if it has one.
    pub fn key_id(&self) -> Option<&KeyId> {
        self.key.key_id()
    }

    /// What a remote engine sends for this job: the operation and its input (the whole
    /// message for a signature, which the key server hashes; the ciphertext for a decryption).
    pub fn remote_input(&self) -> RemoteInput<'_> {
        match &self.op {
            Operation::Sign {
                scheme, message, ..
            } => RemoteInput::Sign {
                scheme: *scheme,
                message,
            },
            Operation::Decrypt { ciphertext } => RemoteInput::Decrypt { ciphertext },
        }
    }

    /// The primitive alone: the private-key operation on the prepared input.
    pub fn primitive(&self) -> Result<Vec<u8>, EngineError> {
        if !self.key.is_local() {
            return Err(EngineError::Failed(
                "no local private key for this certificate (its key lives on key servers only)"
                    .into(),
            ));
        }
        let (scheme, message, digest) = match &self.op {
            Operation::Sign {
                scheme,
                message,
                digest,
            } => (*scheme, message, digest),
            Operation::Decrypt { ciphertext } => {
                return self
                    .key
                    .raw_rsa
                    .as_ref()
                    .and_then(|k| k.private(ciphertext))
                    .ok_or_else(|| {
                        EngineError::Failed(
                            "RSA decryption failed (input not below the modulus?)".into(),
                        )
                    });
            }
        };
        let failed = |what: &str| EngineError::Failed(format!("{what} failed for {scheme:?}"));
        let algs = algorithms(scheme);
        match (&self.key.inner, digest) {
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
            (Inner::Ed25519(k), None) => Ok(k.sign(message).as_ref().to_vec()),
            _ => Err(failed("preparing")),
        }
    }

    /// The finish step: checks a result against the public key (a signature verifies; a
    /// decryption encrypts back to the ciphertext).
    pub fn check(&self, result: &[u8]) -> Result<(), EngineError> {
        let (scheme, message) = match &self.op {
            Operation::Sign {
                scheme, message, ..
            } => (*scheme, message),
            Operation::Decrypt { ciphertext } => {
                let back = self.key.raw_rsa.as_ref().and_then(|k| k.public(result));
                return match back {
                    Some(c) if c[..] == ciphertext[..] => Ok(()),
                    _ => Err(EngineError::WrongResult(
                        "RSA decryption does not encrypt back to the ciphertext".into(),
                    )),
                };
            }
        };
        let must = scheme.is_rsa() || self.verify == VerifyPolicy::All;
        if !must {
            return Ok(());
        }
        UnparsedPublicKey::new(algorithms(scheme).verify, &self.key.public)
            .verify(message, result)
            .map_err(|_| {
                EngineError::WrongResult(format!(
                    "{scheme:?} signature does not verify with the public key"
                ))
            })
    }
}

impl Job for KeyJob {
    type Output = Vec<u8>;

    /// Different keys of one kind and size share a batch; for RSA, signatures and
    /// decryptions too (both are one modular exponentiation with the private exponent).
    fn batch_key(&self) -> u64 {
        match self.key.kind {
            KeyKind::Rsa(bits) => u64::from(bits),
            KeyKind::EcdsaP256 => 1 << 32,
            KeyKind::EcdsaP384 => 2 << 32,
            KeyKind::Ed25519 => 3 << 32,
        }
    }

    fn inline_cost(&self) -> Option<std::time::Duration> {
        crate::cost::inline_cost(self.batch_key())
    }
}

/// Primitive then finish: what the software engines (`inline`, `pool`) run.
pub fn run(job: &KeyJob) -> Result<Vec<u8>, EngineError> {
    let result = job.primitive()?;
    job.check(&result)?;
    Ok(result)
}
