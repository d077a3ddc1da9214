//! Private-key operations as offload jobs.
//!
//! Keys are loaded once into engine-side handles ([`PrivateKey`]); a [`KeyJob`] names a key,
//! it does not copy it. Every operation is split the way the offload layer wants it:
//! **prepare** (hash the message, on the caller: cheap), the **primitive** (the private-key
//! operation: the job an engine runs), and **finish** (verify the signature with the public
//! key before it leaves the process, or encrypt a decryption back to its ciphertext, which
//! defeats RSA-CRT fault attacks and catches a broken engine; a wrong result is an engine
//! failure and the job falls back).
//!
//! Operations: signatures for every TLS 1.2/1.3 scheme of RSA (2048-8192), ECDSA P-256/P-384
//! and Ed25519 keys, and raw RSA decryption for TLS 1.2 RSA key exchange (off by default in
//! the gateway; BoringSSL checks the padding).
//!
//! The software primitives are aws-lc-rs', not BoringSSL's: on this project's CPU they sign
//! RSA-2048 about 1.8x faster (AVX-512 IFMA). aws-lc prefixes its symbols, so it links beside
//! BoringSSL.
//!
//! Dependencies point one way: this crate knows the offload layer and nothing of TLS or HTTP.

mod calibration;
pub mod cost;
mod engines;
mod job;
mod key;
mod mb;
mod policy;
mod raw_rsa;
mod scheme;

pub use engines::{CryptoConfig, build_dispatcher};
pub use job::{KeyJob, OperationKind, RemoteInput, run};
pub use key::{KeyError, KeyId, KeyKind, PrivateKey};
pub use mb::{Kernel, Mb, MbConfig, ct};
pub use policy::{EngineKind, VerifyPolicy};
pub use scheme::SignatureScheme;

/// Measures what `key`'s kind costs on this machine, once per kind per process, when a key
/// is loaded (off the event loop): one software operation ([`cost`]: the dashboard's CPU
/// saved) and, for RSA, a full batch on each IFMA kernel the CPU has (with the first,
/// where the `mb` engine computes a partial batch).
pub fn calibrate(key: &std::sync::Arc<PrivateKey>) {
    if let Some(job) = calibration::probe_job(key) {
        calibration::calibrate(&job);
        mb::crossover::calibrate(&job);
    }
}

#[cfg(test)]
mod tests;
