//! The mb engine's side of a key job: the key in the engine's form and the number to raise
//! to the private exponent. Here rather than in `job`, so that the job knows nothing of the
//! engines that run it.

use super::key::{self, MbKey};
use super::pad;
use crate::job::{KeyJob, Operation};
use crate::scheme::SignatureScheme;
use sluice_offload::EngineError;

impl KeyJob {
    /// The key in the mb engine's form, when it has one.
    pub(crate) fn mb_key(&self) -> Option<&MbKey> {
        self.key.mb()
    }

    /// The mb engine's prepare step: the key and the number to raise to the private
    /// exponent, in limbs (the encoded message of a signature, or the ciphertext).
    pub(crate) fn mb_prepare(&self) -> Result<(&MbKey, Vec<u64>), EngineError> {
        let unsupported = || EngineError::Failed("not an operation the mb engine has".into());
        let mbk = self.key.mb().ok_or_else(unsupported)?;
        let k = mbk.bits as usize / 8;
        let input = match &self.op {
            Operation::Sign {
                scheme,
                digest: Some(d),
                ..
            } if scheme.is_rsa() => {
                let hash = d.as_ref();
                match scheme {
                    SignatureScheme::RsaPkcs1Sha256
                    | SignatureScheme::RsaPkcs1Sha384
                    | SignatureScheme::RsaPkcs1Sha512 => pad::pkcs1(hash, k),
                    _ => pad::pss(d.algorithm(), hash, mbk.bits as usize, k),
                }
                .ok_or_else(|| EngineError::Failed(format!("encoding {scheme:?} failed")))?
            }
            Operation::Decrypt { ciphertext } => {
                if !mbk.below_n(ciphertext) {
                    return Err(EngineError::Failed(
                        "RSA decryption input not below the modulus".into(),
                    ));
                }
                ciphertext.to_vec()
            }
            Operation::Sign { .. } => return Err(unsupported()),
        };
        let limbs = key::be_to_limbs(&input, mbk.nn()).ok_or_else(unsupported)?;
        Ok((mbk, limbs))
    }
}
