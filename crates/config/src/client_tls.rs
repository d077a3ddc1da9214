//! What Sluice presents when it is the TLS client and a server asks for a certificate.

/// A client certificate (PEM chain, leaf first) and its key (PEM), checked to belong together
/// when loaded.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The chain.
    pub cert_pem: Vec<u8>,
    /// The key.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientIdentity(..)")
    }
}
