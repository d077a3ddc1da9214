//! What a key job may run on and what must be checked before its result leaves the process:
//! plain choices that the job, the engines and the configuration all name, kept in a leaf so
//! that none of them imports another for them.

/// A configurable engine (the software `inline` engine always ends the chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// Dedicated threads.
    Pool,
    /// AVX-512 IFMA multi-buffer RSA (answers `Unsupported` without IFMA).
    Mb,
    /// Remote key servers (built by the `sluice-keyless` crate, handed to
    /// `build_dispatcher`).
    Keyless,
}

/// Which signatures the software engines verify before they leave the process.
///
/// RSA signatures are always verified: a fault in an RSA-CRT computation leaks the key, and
/// verification costs about 2% of the signature. Verifying ECDSA and Ed25519 costs four to
/// five times their signature (measured with `sluice speed`: P-256 55k signs/s unverified,
/// 11k verified), so for aws-lc-rs's well-tested software primitives it is opt-in. Engines
/// that compute elsewhere (batching, remote, accelerators) verify every result themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyPolicy {
    /// Every signature.
    All,
    /// RSA signatures only (the default).
    Rsa,
}
