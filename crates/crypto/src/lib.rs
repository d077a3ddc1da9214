//! Private-key operations as offload jobs.
//!
//! Keys are loaded once into engine-side handles ([`PrivateKey`]); a [`SignJob`] names a key,
//! it does not copy it. Every signature is split the way the offload layer wants it:
//! **prepare** (hash the message, on the caller: cheap), the **primitive** (the private-key
//! operation: the job an engine runs), and **finish** (verify the signature with the public
//! key before it leaves the process, which defeats RSA-CRT fault attacks and catches a broken
//! engine; a wrong signature is an engine failure and the job falls back).
//!
//! The software primitives are aws-lc-rs', not BoringSSL's: on this project's CPU they sign
//! RSA-2048 about 1.8x faster (AVX-512 IFMA). aws-lc prefixes its symbols, so it links beside
//! BoringSSL.
//!
//! Dependencies point one way: this crate knows the offload layer and nothing of TLS or HTTP.

mod engines;
mod key;
mod scheme;
mod sign;

pub use engines::{CryptoConfig, EngineKind, VerifyPolicy, build_dispatcher};
pub use key::{KeyError, KeyKind, PrivateKey};
pub use scheme::SignatureScheme;
pub use sign::{SignJob, sign};

#[cfg(test)]
mod tests;
