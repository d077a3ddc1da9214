/// Why TLS could not be set up for a listener.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// BoringSSL refused a setting or ran out of memory.
    #[error("BoringSSL: {context}: {source}")]
    Boring {
        /// What Sluice was doing.
        context: &'static str,
        /// BoringSSL's error queue.
        #[source]
        source: boring::error::ErrorStack,
    },
    /// A ticket key file could not be used.
    #[error("ticket key file {path}: {reason}")]
    TicketKeyFile {
        /// The file.
        path: String,
        /// What is wrong with it and what to do.
        reason: String,
    },
    /// A certificate whose key lives on key servers has a key kind they cannot sign with.
    #[error(
        "a certificate signed through key servers must have an RSA (2048+), ECDSA P-256/P-384 or Ed25519 key"
    )]
    UnsupportedRemoteKey,
    /// Client-certificate settings that cannot be used.
    #[error("client certificates: {0}")]
    ClientAuth(String),
    /// Writing generated certificates failed.
    #[error("cannot write {path}: {source}; check that the state directory is writable")]
    Write {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl TlsError {
    /// Wraps a BoringSSL error with what was being done.
    pub fn boring(context: &'static str) -> impl FnOnce(boring::error::ErrorStack) -> Self {
        move |source| TlsError::Boring { context, source }
    }
}
